"""The thinker stage of both Qwen-Omni families on the continuous-batching AR engine.

`ThinkerAdapter` plugs the thinker's text model (`thinker.model` + `thinker.lm_head`, unmodified,
with the paged attention on its text config only) into `ARTorchEngine`. It reproduces what
`thinker.generate(..., output_hidden_states=True)` computes inside
`Qwen2_5OmniForConditionalGeneration.generate` / `Qwen3OmniMoeForConditionalGeneration.generate`:

- admission (`admit`): a prompt with audio, image or video parts gets its 3-D M-RoPE positions from
  the thinker's `get_rope_index` (generated tokens then sit at `index + rope_delta`); its multimodal
  features are merged into the input embeddings once, the way the thinker's forward merges them
  (the audio tower and vision encoder run, their features scattered over the placeholder positions;
  for Qwen3 also the deepstack features added at the early layers), in `embed_media`, which the
  engine calls before its next step with every request admitted since: their audio clips go
  through the audio tower in one call, so requests that arrive together do not encode one by one;
- every step's hidden-state outputs for the talker, named payloads of [n, hidden] rows:
  `embeds` (`hidden_states[0]`, the input embeddings with multimodal features merged) and `hidden`
  (the layer the talker reads). The prefill output carries the prompt's rows; the output with
  token g_k carries the rows of input g_{k-1}; the last token's rows are never computed, exactly as
  in `generate()`;
- the first output's params carry what the talker needs for its own positions: the prompt ids,
  image/video grids (and the videos' seconds per grid) and audio feature lengths.

Text-only decode batches run in CUDA graphs. A thinker with mixture-of-experts blocks (Qwen3's)
needs them without host syncs (`stages.ar.moe.use_grouped_moe`, which the family's loader installs);
one left with transformers' own experts loop runs eagerly.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.nn.functional import pad

from stages.ar.attention import use_paged_attention
from stages.ar.model_adapter import ModelInputs, ModelOutputs
from stages.ar.moe import has_host_synced_moe
from stages.ar.mrope import rope_position_ids
from stages.ar.sequence import Sequence
from stages.config import StageDeployConfig
from stages.protocol import StageRequest
from stages.tensors import from_wire

log = logging.getLogger(__name__)

MM_PAYLOADS = (
    "input_features",
    "feature_attention_mask",
    "pixel_values",
    "image_grid_thw",
    "pixel_values_videos",
    "video_grid_thw",
    "video_second_per_grid",
)


class ThinkerAdapter:
    always_embed = False

    def __init__(self, thinker, *, deepstack: bool = False):
        use_paged_attention(thinker.model)
        self.model = thinker
        self.text_config = thinker.config.get_text_config()
        self.deepstack = deepstack
        self.supports_cuda_graphs = not has_host_synced_moe(thinker.model)

    # -- admission ---------------------------------------------------------------------------

    @torch.inference_mode()
    def admit(self, seq: Sequence, request: StageRequest) -> None:
        device = self.model.device
        inputs = {key: from_wire(value, device) for key, value in request.payloads.items() if key in MM_PAYLOADS}
        prompt_ids = list(seq.token_ids)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        use_audio_in_video = bool(request.options.extra.get("use_audio_in_video", False))
        audio_lengths = inputs["feature_attention_mask"].sum(-1) if "feature_attention_mask" in inputs else None
        positions, delta = self.model.get_rope_index(
            ids,
            inputs.get("image_grid_thw"),
            inputs.get("video_grid_thw"),
            torch.ones_like(ids),
            use_audio_in_video,
            audio_lengths,
            inputs.get("video_second_per_grid"),
        )
        seq.position_delta = int(delta.reshape(-1)[0])
        if any(key in inputs for key in ("input_features", "pixel_values", "pixel_values_videos")):
            seq.extra["rope"] = positions[:, 0, :]  # [3, prompt]
            seq.extra["media"] = (ids, inputs)
        seq.output_params = talker_position_inputs(prompt_ids, inputs, use_audio_in_video)

    @torch.inference_mode()
    def embed_media(self, seqs: list[Sequence]) -> list[tuple[Sequence, Exception]]:
        """Merge the media of newly admitted sequences into their prompt embeddings, their audio
        encoded together; the sequences whose media failed, with the error (the others go on)."""
        waiting = [(seq, *seq.extra.pop("media")) for seq in seqs if "media" in seq.extra]
        audio = self._audio_features_together(waiting)
        failed = []
        for seq, ids, inputs in waiting:
            try:
                embeds, visual = self._merged_embeddings(ids, inputs, audio.get(id(seq)))
            except Exception as error:  # one request's bad media fails that request only
                failed.append((seq, error))
                continue
            later_chunks = [segment for segment in seq.embeds_segments if segment[0] >= embeds.shape[0]]
            seq.embeds_segments = [(0, embeds), *later_chunks]
            if visual is not None:
                seq.extra["deepstack"] = visual
        return failed

    def _audio_features_together(self, waiting: list[tuple[Sequence, torch.Tensor, dict]]) -> dict[int, torch.Tensor]:
        """{id(seq): its audio features} for the (sequence, prompt ids, media) with audio, from one
        audio-tower call over all their clips (padded to the longest); empty for fewer than two, or if
        the joint call fails (each sequence then encodes its own and fails alone)."""
        with_audio = [(seq, ids, inputs) for seq, ids, inputs in waiting if "feature_attention_mask" in inputs]
        if len(with_audio) < 2:
            return {}
        masks = [inputs["feature_attention_mask"] for _, _, inputs in with_audio]
        width = max(mask.shape[-1] for mask in masks)
        padded = [
            (pad(inputs["input_features"], (0, width - mask.shape[-1])), pad(mask, (0, width - mask.shape[-1])))
            for (_, _, inputs), mask in zip(with_audio, masks, strict=True)
        ]
        try:
            audio = self.model.get_audio_features(
                torch.cat([features for features, _ in padded]),
                torch.cat([mask for _, mask in padded]),
                None,
                return_dict=True,
            ).last_hidden_state
            rows = [int((ids == self.model.config.audio_token_id).sum()) for _, ids, _ in with_audio]
            return {id(seq): part for (seq, _, _), part in zip(with_audio, audio.split(rows), strict=True)}
        except Exception:
            log.exception("encoding %d audio prompts together failed; encoding each alone", len(with_audio))
            return {}

    def _merged_embeddings(self, ids: torch.Tensor, inputs: dict[str, torch.Tensor], audio=None):
        """Steps 1-2 of the thinker's forward: text embeddings with audio (`audio`: the features when
        already encoded), image and video features scattered over their placeholders; for deepstack
        models also (visual mask, per-layer features)."""
        thinker = self.model
        embeds = thinker.get_input_embeddings()(ids)
        if "input_features" in inputs:
            if audio is None:
                audio = thinker.get_audio_features(
                    inputs["input_features"], inputs.get("feature_attention_mask"), None, return_dict=True
                ).last_hidden_state
            _, _, audio_mask = thinker.get_placeholder_mask(ids, inputs_embeds=embeds)
            embeds = embeds.masked_scatter(audio_mask, audio.to(embeds.device, embeds.dtype))
        masks, multiscale = [], []
        for pixels, grid, kind in (
            ("pixel_values", "image_grid_thw", "image"),
            ("pixel_values_videos", "video_grid_thw", "video"),
        ):
            if pixels not in inputs:
                continue
            encode = thinker.get_image_features if kind == "image" else thinker.get_video_features
            outputs = encode(inputs[pixels], inputs[grid], return_dict=True)
            features = torch.cat(outputs.pooler_output, dim=0).to(embeds.device, embeds.dtype)
            image_mask, video_mask, _ = thinker.get_placeholder_mask(
                ids, inputs_embeds=embeds, **{f"{kind}_features": features}
            )
            mask = image_mask if kind == "image" else video_mask
            embeds = embeds.masked_scatter(mask, features)
            masks.append(mask[0, :, 0])
            if self.deepstack:
                multiscale.append([torch.cat(layer, dim=0) for layer in outputs.deepstack_features])
        return embeds[0], self._deepstack_rows(masks, multiscale)

    def _deepstack_rows(self, masks: list[torch.Tensor], multiscale: list[list[torch.Tensor]]):
        """(visual position mask [prompt], per-layer features [visual positions, hidden]) in prompt order."""
        if not self.deepstack or not masks:
            return None
        joint = masks[0] if len(masks) == 1 else masks[0] | masks[1]
        layers = []
        for index in range(len(multiscale[0])):
            rows = multiscale[0][index].new_zeros(int(joint.sum()), multiscale[0][index].shape[-1])
            for mask, features in zip(masks, multiscale, strict=True):
                rows[mask[joint]] = features[index]
            layers.append(rows)
        return joint, layers

    # -- the model step ----------------------------------------------------------------------

    def embed(self, token_ids: torch.Tensor, inputs: ModelInputs) -> torch.Tensor:
        return self.model.get_input_embeddings()(token_ids)

    def forward(self, inputs: ModelInputs) -> ModelOutputs:
        kwargs: dict[str, Any] = {}
        if inputs.output_hidden_states:
            kwargs["output_hidden_states"] = True
        if self.deepstack:
            kwargs.update(self._deepstack_inputs(inputs))
        out = self.model.model(
            input_ids=inputs.input_ids,
            inputs_embeds=inputs.inputs_embeds,
            position_ids=rope_position_ids(inputs),
            use_cache=False,
            ar_batch=inputs.attention,
            **kwargs,
        )
        rows = out.last_hidden_state[0]
        if inputs.logits_indices is not None:
            rows = rows[inputs.logits_indices]
        hidden = tuple(h[0] for h in out.hidden_states) if inputs.output_hidden_states else None
        return ModelOutputs(logits=self.model.lm_head(rows), hidden_states=hidden)

    def _deepstack_inputs(self, inputs: ModelInputs) -> dict[str, Any]:
        """The text model's `visual_pos_masks` [1, T] and per-layer features for the packed rows."""
        pieces, masks, any_visual = [], [], False
        for seq, start, count in inputs.sequences:
            visual = seq.extra.get("deepstack")
            mask = torch.zeros(count, dtype=torch.bool, device=self.model.device)
            if visual is not None and start < visual[0].shape[0]:
                joint, layers = visual
                end = min(start + count, joint.shape[0])
                mask[: end - start] = joint[start:end]
                first, last = int(joint[:start].sum()), int(joint[:end].sum())
                pieces.append([layer[first:last] for layer in layers])
                any_visual = any_visual or last > first
            masks.append(mask)
        if not any_visual:
            return {}
        per_layer = [torch.cat([piece[index] for piece in pieces]) for index in range(len(pieces[0]))]
        return {"visual_pos_masks": torch.cat(masks).unsqueeze(0), "deepstack_visual_embeds": per_layer}


def talker_position_inputs(prompt_ids: list[int], inputs: dict[str, torch.Tensor], use_audio_in_video: bool):
    params: dict[str, Any] = {"thinker_prompt_ids": prompt_ids, "use_audio_in_video": use_audio_in_video}
    if "image_grid_thw" in inputs:
        params["image_grid_thw"] = inputs["image_grid_thw"].tolist()
    if "video_grid_thw" in inputs:
        params["video_grid_thw"] = inputs["video_grid_thw"].tolist()
    if "video_second_per_grid" in inputs:
        params["video_second_per_grid"] = inputs["video_second_per_grid"].tolist()
    if "feature_attention_mask" in inputs:
        params["audio_feature_lengths"] = inputs["feature_attention_mask"].sum(-1).tolist()
    return params


def build_thinker_engine(
    thinker, tokenizer, stage_deploy: StageDeployConfig, *, hidden_layer: int, stop_ids, deepstack: bool = False
):
    """The thinker stage: `ARTorchEngine` over `ThinkerAdapter`, sending the talker its rows unless
    `options.talker_inputs` is false (the thinker-only pipeline)."""
    import msgspec

    from stages.ar.torch_engine import ARTorchEngine

    options = dict(stage_deploy.options)
    if options.pop("talker_inputs", True):
        options["hidden_payloads"] = {"embeds": 0, "hidden": hidden_layer}
    deploy = msgspec.structs.replace(stage_deploy, options=options)
    adapter = ThinkerAdapter(thinker, deepstack=deepstack)
    return ARTorchEngine(
        adapter, tokenizer, deploy, device=stage_deploy.device, eos_token_ids=set(stop_ids), stage_id=0
    )
