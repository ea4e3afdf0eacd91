"""The AR `torch` engine: continuous batching over an unmodified transformers model.

    ARTorchEngine.from_pretrained(model_dir, stage_deploy, device="cpu")

`step()` reads top-down: the scheduler picks the work, the model runner computes it, the sampler
picks the next tokens, and each request's outputs (token and text deltas, hidden states, finish)
are built. Knobs come from `StageDeployConfig`: `max_batch`, `max_length`, `dtype`, `kv_memory_mb`
(sizes the paged cache once), `prefill_chunk` (the per-step token budget: 2048 on CUDA, 512
elsewhere) and `options`:
`block_size` (16), `num_kv_blocks` (overrides the memory budget), `cuda_graphs` (True: on CUDA;
"uncaptured": the graph step's static buffers run eagerly, for tests), `compile` (true on CUDA,
false elsewhere: compiles the graph step's decoder layers with torch.compile before capture, one
graph per batch size shared by all layers, see `compiled_layers.py`), `prompt_graphs` (as `cuda_graphs`:
on CUDA prompts from their first token, alone in a step or beside the decodes' graph, replay a
graph captured per token bucket, see `prompt_graphs.py`; "uncaptured": their static buffers run eagerly, for tests),
`hidden_layers` (default per-request hidden-state outputs), `hidden_payloads` (a name -> layer dict:
default hidden-state outputs as one [n, hidden] payload per name, e.g. {"embeds": 0, "hidden": -1},
which joins cleanly along rows when a receiver concatenates chunks), `sampling` (default sampling dict).

Per request (`StageRequest.options.extra`): `hidden_layers` (indices into transformers'
hidden_states tuple; 0 is the embeddings, -1 the last) returns `payloads["hidden"]` as
[layers, n, hidden] for the n positions computed in that step, with `params["hidden_start"]` their
first position.
A request added with `finished=False` prefills its input as it arrives and starts generating after
the chunk with `finished=True`.

Other model modules (an omni thinker or talker) plug in through a model adapter (see
`stages/ar/model_adapter.py`): load the module with `attn_implementation=ATTENTION_NAME` on its text
part after `attention.register()`, then `ARTorchEngine(adapter, tokenizer, stage_deploy, eos_token_ids=...)`.
An adapter with an `admit(seq, request)` method sees each request once it is a `Sequence` (multimodal
embeddings, rotary tables, params for the first output); one with `embed_media(seqs)` is handed,
before each step, every sequence admitted since the last one, so it can encode their media in one
call. A stage engine that interprets its input itself (a talker fed by a thinker) adds parsed
sequences with `add_sequence`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from stages.ar.attention import ATTENTION_NAME, paged_attention_modules, register
from stages.ar.block_manager import BlockManager
from stages.ar.detokenizer import IncrementalDetokenizer
from stages.ar.inputs import check_token_ids, parse_hidden_layers, parse_sampling
from stages.ar.kv_cache import KVCacheShape, PagedKVCache
from stages.ar.model_adapter import CausalLMAdapter
from stages.ar.model_runner import ModelRunner
from stages.ar.sampler import Sampler
from stages.ar.scheduler import Scheduler
from stages.ar.sequence import Sequence
from stages.config import StageDeployConfig
from stages.engine import StageEngine
from stages.engine_stats import StepStats
from stages.errors import ConfigError, InvalidRequest
from stages.protocol import SamplingParams, StageError, StageOutput, StageRequest
from stages.replica_stats import Capacity
from stages.tensors import from_wire, to_wire

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ARTorchEngine(StageEngine):
    unit = "tokens"
    last_step = StepStats()

    def __init__(
        self,
        adapter,
        tokenizer,
        stage_deploy: StageDeployConfig | None = None,
        *,
        device: str | torch.device | None = None,
        eos_token_ids: set[int] | None = None,
        stage_id: int = 0,
    ):
        deploy = stage_deploy or StageDeployConfig()
        self.deploy = deploy
        self.adapter = adapter
        self.tokenizer = tokenizer
        self.stage_id = stage_id
        self.device = torch.device(device or deploy.device)
        self.options = dict(deploy.options)
        config = adapter.text_config
        if "sliding_attention" in (getattr(config, "layer_types", None) or []):
            raise ConfigError("model", "sliding-window attention layers are not supported by the torch AR engine")
        self.vocab_size = config.vocab_size
        self.num_layers = config.num_hidden_layers
        self.hidden_size = config.hidden_size
        self.eos_token_ids = set(eos_token_ids or ())
        self.hidden_payloads: dict[str, int] = dict(self.options.get("hidden_payloads") or {})
        default_layers = self.options.get("hidden_layers")
        if self.hidden_payloads:
            default_layers = list(self.hidden_payloads.values())
        self.default_hidden_layers = parse_hidden_layers(default_layers, self.num_layers)

        block_size = int(self.options.get("block_size", 16))
        shape = KVCacheShape(
            num_layers=config.num_hidden_layers,
            num_kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
            dtype=next(adapter.model.parameters()).dtype,
        )
        num_blocks = int(
            self.options.get("num_kv_blocks") or shape.num_blocks_for(deploy.kv_memory_mb << 20, block_size)
        )
        self.block_manager = BlockManager(num_blocks, block_size)
        self.kv_cache = PagedKVCache(shape, num_blocks, block_size, self.device)
        self.kv_cache.bind(paged_attention_modules(adapter.model))
        self.max_length = min(
            deploy.max_length,
            self.block_manager.capacity_tokens,
            getattr(config, "max_position_embeddings", deploy.max_length),
        )
        self.scheduler = Scheduler(self.block_manager, deploy.max_batch, self._prefill_budget(deploy))
        self.runner = ModelRunner(adapter, self.kv_cache, self.block_manager, self.device)
        self.sampler = Sampler(self.eos_token_ids, self.device)
        self.sequences: dict[str, Sequence] = {}
        self.embed_media = getattr(adapter, "embed_media", None)
        self.admitted: list[Sequence] = []  # since the last step, for `embed_media`
        self._default_generator = torch.Generator(device=self.device)
        self._default_generator.manual_seed(int(self.options.get("seed", 0)))
        graphs, compile_step = (
            self.options.get("cuda_graphs", True),
            self.options.get("compile", self.device.type == "cuda"),
        )
        if not isinstance(compile_step, bool):
            raise ConfigError("options.compile", f"must be true or false, got {compile_step!r}")
        graphs = graphs if adapter.supports_cuda_graphs else False
        if graphs == "uncaptured":  # the graph step's static buffers without capture (tests it on CPU)
            self.runner.enable_cuda_graphs(deploy.max_batch, self.max_length, capture=False, compile=compile_step)
        elif graphs and self.device.type == "cuda":
            self.runner.enable_cuda_graphs(deploy.max_batch, self.max_length, compile=compile_step)
        prompt_graphs = self.options.get("prompt_graphs", graphs is True) if adapter.supports_cuda_graphs else False
        if prompt_graphs not in (True, False, "uncaptured"):
            raise ConfigError("options.prompt_graphs", f"must be true, false or 'uncaptured', got {prompt_graphs!r}")
        if prompt_graphs == "uncaptured":
            self.runner.enable_prompt_graphs(self.scheduler.token_budget, deploy.max_batch, capture=False)
        elif prompt_graphs and self.device.type == "cuda":
            self.runner.enable_prompt_graphs(self.scheduler.token_budget, deploy.max_batch)

    def _prefill_budget(self, deploy: StageDeployConfig) -> int:
        if deploy.prefill_chunk is not None:
            return max(deploy.prefill_chunk, 1)
        return 2048 if self.device.type == "cuda" else 512

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | Path,
        stage_deploy: StageDeployConfig | None = None,
        *,
        device: str | None = None,
        stage_id: int = 0,
    ) -> ARTorchEngine:
        """Load an `AutoModelForCausalLM` checkpoint directory with its tokenizer (`load_format: dummy`:
        build the model from its config on the device, with seeded random weights)."""
        from transformers import AutoTokenizer, GenerationConfig

        deploy = stage_deploy or StageDeployConfig()
        model = load_causal_lm(model_dir, deploy, device or deploy.device)
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        return cls(
            CausalLMAdapter(model),
            tokenizer,
            deploy,
            device=device,
            eos_token_ids=eos_token_ids(model.generation_config or GenerationConfig()),
            stage_id=stage_id,
        )

    # -- StageEngine -------------------------------------------------------------------------

    def add_request(self, request: StageRequest) -> None:
        sampling = parse_sampling(request, self.deploy.sampling)
        hidden_layers = parse_hidden_layers(request.options.extra.get("hidden_layers"), self.num_layers)
        token_ids, embeds = self._prompt_of(request)
        if not token_ids and embeds is None and request.finished:
            raise InvalidRequest("prompt", "the prompt is empty")
        seq = self.add_sequence(
            request.request_id,
            token_ids,
            embeds,
            sampling,
            input_finished=request.finished,
            hidden_layers=hidden_layers,
            stage_id=request.stage_id,
        )
        admit = getattr(self.adapter, "admit", None)
        if admit is not None:
            try:
                admit(seq, request)
            except Exception:
                self.abort(seq.request_id)
                raise
        if self.embed_media is not None:
            self.admitted.append(seq)

    def add_sequence(
        self,
        request_id: str,
        token_ids: list[int],
        embeds: torch.Tensor | None,
        sampling: SamplingParams,
        *,
        input_finished: bool = True,
        hidden_layers: tuple[int, ...] = (),
        stage_id: int | None = None,
    ) -> Sequence:
        """Admit one sequence (the parsed form of `add_request`, for stage engines built on this one)."""
        if request_id in self.sequences:
            raise InvalidRequest("request_id", f"request {request_id!r} is already in this engine")
        sampling.validate()
        check_token_ids(sampling.stop_token_ids, self.vocab_size, "stop_token_ids")
        seq = Sequence(
            request_id=request_id,
            token_ids=[],
            sampling=sampling,
            max_length=self.max_length,
            input_finished=input_finished,
            hidden_layers=hidden_layers or self.default_hidden_layers,
            stage_id=self.stage_id if stage_id is None else stage_id,
        )
        seq.append_prompt(token_ids, embeds)
        self._check_length(seq)
        if sampling.seed is not None:
            seq.generator = torch.Generator(device=self.device)
            seq.generator.manual_seed(sampling.seed)
        else:
            seq.generator = self._default_generator
        seq.detokenizer = IncrementalDetokenizer(self.tokenizer, sampling.stop) if self.tokenizer else None
        self.sequences[request_id] = seq
        self.scheduler.add(seq)
        return seq

    def add_chunk(self, request: StageRequest) -> None:
        seq = self.sequences.get(request.request_id)
        if seq is None:
            raise InvalidRequest("request_id", f"no request {request.request_id!r} waits for input here")
        if seq.input_finished:
            raise InvalidRequest("finished", f"request {request.request_id!r} already received its last chunk")
        token_ids, embeds = self._prompt_of(request)
        before = seq.num_tokens
        seq.append_prompt(token_ids, embeds)
        try:
            self._check_length(seq)
        except InvalidRequest:
            del seq.token_ids[before:]
            seq.embeds_segments = [s for s in seq.embeds_segments if s[0] < before]
            seq.num_prompt_tokens = before
            raise
        if request.finished:
            if seq.num_tokens == 0:
                raise InvalidRequest("prompt", "the prompt is empty")
            seq.input_finished = True

    def step(self) -> list[StageOutput]:
        failed = self._embed_admitted_media()
        batch = self.scheduler.schedule()
        self.last_step = StepStats()
        if not batch:
            return failed
        try:
            result = self.runner.run(batch)
        except Exception as error:  # a model failure fails this batch, not the engine
            logger.exception("AR forward failed")
            return [self._fail(seq, error) for seq, _ in batch.work]
        for seq, count in batch.work:
            seq.num_computed_tokens += count
        tokens = self.sampler(result.logits, result.sampling) if result.sampling else []
        self.last_step = StepStats(batch=len(batch.work), units=len(tokens))
        next_token = {id(seq): token for seq, token in zip(result.sampling, tokens, strict=True)}
        outputs = []
        for seq, _ in batch.work:
            try:
                output = self._postprocess(seq, next_token.get(id(seq)), result.hidden.get(id(seq)))
            except Exception as error:
                logger.exception("postprocessing %s failed", seq.request_id)
                output = self._fail(seq, error)
            if output is not None:
                outputs.append(output)
        return failed + outputs

    def _embed_admitted_media(self) -> list[StageOutput]:
        """Let the adapter merge the media of every request admitted since the last step, together;
        error outputs for those whose media failed."""
        if not self.admitted:
            return []
        admitted, self.admitted = self.admitted, []
        live = [seq for seq in admitted if self.sequences.get(seq.request_id) is seq]
        return [self._fail(seq, error) for seq, error in self.embed_media(live)]

    def abort(self, request_id: str) -> None:
        seq = self.sequences.pop(request_id, None)
        if seq is not None:
            self.scheduler.finish(seq, "abort")

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def capacity(self) -> Capacity:
        """Paged KV-cache blocks in use (the reserved null block left out)."""
        total = self.block_manager.num_blocks - 1
        return Capacity(kind="kv_blocks", used=total - self.block_manager.num_free_blocks, total=total)

    # -- helpers -----------------------------------------------------------------------------

    def _prompt_of(self, request: StageRequest) -> tuple[list[int], torch.Tensor | None]:
        if request.inputs_embeds is not None:
            if request.prompt_token_ids or request.prompt or request.messages:
                raise InvalidRequest("inputs_embeds", "give either inputs_embeds or a prompt, not both")
            return [], self._embeds_of(request)
        if request.prompt_token_ids is not None:
            token_ids = list(request.prompt_token_ids)
            check_token_ids(token_ids, self.vocab_size, "prompt_token_ids")
            return token_ids, None
        if request.messages is not None:
            return self._apply_chat_template(request.messages), None
        if request.prompt:
            return self._tokenize(request.prompt), None
        return [], None

    def _embeds_of(self, request: StageRequest) -> torch.Tensor:
        if not hasattr(request.inputs_embeds, "data"):
            raise InvalidRequest("inputs_embeds", "resolve connector handles before add_request")
        embeds = from_wire(request.inputs_embeds)
        if embeds.ndim != 2 or embeds.shape[1] != self.hidden_size:
            raise InvalidRequest("inputs_embeds", f"expected [n, {self.hidden_size}], got {list(embeds.shape)}")
        if embeds.shape[0] == 0:
            raise InvalidRequest("inputs_embeds", "no rows")
        return embeds.to(self.device)

    def _tokenize(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise InvalidRequest("prompt", "this stage has no tokenizer; send prompt_token_ids")
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        if self.tokenizer is None:
            raise InvalidRequest("messages", "this stage has no tokenizer; send prompt_token_ids")
        try:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        except Exception as error:
            raise InvalidRequest("messages", f"cannot apply the chat template: {error}") from None
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def _check_length(self, seq: Sequence) -> None:
        if seq.num_tokens >= self.max_length:
            field = "inputs_embeds" if seq.has_embeds else "prompt"
            raise InvalidRequest(field, f"the prompt has {seq.num_tokens} tokens; max_length is {self.max_length}")

    def _postprocess(self, seq: Sequence, token: int | None, hidden) -> StageOutput | None:
        payloads, params = {}, {}
        if hidden is not None:
            first, rows = hidden
            payloads, params = self._hidden_outputs(seq, first, rows)
            seq.num_hidden_emitted = first + rows.shape[1]
        if token is None:
            if not payloads:
                return None
            return self._output(seq, payloads=payloads, params=params)
        now = time.monotonic()
        metrics = {}
        if seq.first_token_time is None:
            seq.first_token_time = now
            metrics["ttft"] = now - seq.arrival_time
            metrics["num_prompt_tokens"] = seq.num_prompt_tokens  # what was consumed, if it is cancelled now
        seq.token_ids.append(token)
        reason = self._finish_reason(seq, token)
        if reason is not None:
            self.scheduler.finish(seq, reason)
            self.sequences.pop(seq.request_id, None)
            metrics.update(
                e2e=now - seq.arrival_time,
                num_prompt_tokens=seq.num_prompt_tokens,
                num_output_tokens=seq.num_output_tokens,
            )
        text = seq.detokenizer.take_delta(seq.is_finished) if seq.detokenizer else ""
        return self._output(seq, text=text, token_ids=[token], payloads=payloads, params=params, metrics=metrics)

    def _hidden_outputs(self, seq: Sequence, first: int, rows: torch.Tensor) -> tuple[dict, dict]:
        """Named [n, hidden] payloads when the engine is configured with `hidden_payloads` and the request
        asked for no layers of its own; else one [layers, n, hidden] payload "hidden"."""
        params = {"hidden_start": first}
        if self.hidden_payloads and seq.hidden_layers == self.default_hidden_layers:
            return {name: to_wire(rows[index]) for index, name in enumerate(self.hidden_payloads)}, params
        params["hidden_layers"] = list(seq.hidden_layers)
        return {"hidden": to_wire(rows)}, params

    def _finish_reason(self, seq: Sequence, token: int) -> str | None:
        params = seq.sampling
        may_stop = seq.num_output_tokens >= params.min_tokens
        if may_stop and (token in params.stop_token_ids or (not params.ignore_eos and token in self.eos_token_ids)):
            if seq.detokenizer:
                seq.detokenizer.flush()
            return "stop"
        if seq.detokenizer and seq.detokenizer.add_token(token, check_stop=may_stop):
            return "stop"
        if seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= self.max_length:
            if seq.detokenizer and seq.detokenizer.flush():
                return "stop"
            return "length"
        return None

    def _output(self, seq: Sequence, **fields) -> StageOutput:
        if seq.output_params:
            fields["params"] = {**seq.output_params, **fields.get("params", {})}
            seq.output_params = {}
        return StageOutput(
            request_id=seq.request_id,
            stage_id=seq.stage_id,
            seq=seq.next_output_seq(),
            finished=seq.is_finished,
            finish_reason=seq.finish_reason if seq.is_finished else None,
            **fields,
        )

    def _fail(self, seq: Sequence, error: Exception) -> StageOutput:
        self.scheduler.finish(seq, "error")
        self.sequences.pop(seq.request_id, None)
        return self._output(seq, error=StageError(message=f"{type(error).__name__}: {error}", type="server_error"))


def load_causal_lm(model_dir: str | Path, deploy: StageDeployConfig, device: str):
    """The checkpoint's causal LM on `device` with the paged attention (`load_format: dummy`: built from its
    config there, with seeded random weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from stages.models.dummy_weights import build_random, dummy_seed, has_weights
    from stages.models.weight_reads import announce_checkpoint, counted_reads

    register()
    seed = dummy_seed(deploy)
    if seed is None:
        if Path(model_dir).is_dir() and not has_weights(model_dir):
            raise ConfigError("model", f"{model_dir} has no weight files (configs only serve with load_format dummy)")
        announce_checkpoint(model_dir)
        with counted_reads("transformers"):
            model = AutoModelForCausalLM.from_pretrained(
                str(model_dir), dtype=DTYPES[deploy.dtype], attn_implementation=ATTENTION_NAME
            )
        return model.to(device).eval()
    config = AutoConfig.from_pretrained(str(model_dir))
    model = build_random(
        lambda: AutoModelForCausalLM.from_config(
            config, dtype=DTYPES[deploy.dtype], attn_implementation=ATTENTION_NAME
        ),
        device=device,
        seed=seed,
    )
    if (Path(model_dir) / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(str(model_dir))
    return model


def eos_token_ids(generation_config) -> set[int]:
    eos = generation_config.eos_token_id
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, list | tuple) else {int(eos)}
