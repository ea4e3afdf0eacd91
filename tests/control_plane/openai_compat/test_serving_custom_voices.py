"""Custom voices on the tiny Qwen2.5-Omni through the live platform and the official SDK: a voice made
from a generated wav clip is listed with the built-in ones, stores the conditioning the derivation
function gives for that clip, and speaks in chat (audio out) and speech with audio that differs from
the default voice's with the same seed; another user cannot use it; deleting it makes it unknown. Bad
clips (not audio, too short, too long), a family that takes no reference clip and a taken name are
refused in OpenAI's error shape."""

from __future__ import annotations

import base64
import io

import numpy as np
import openai
import pytest
import soundfile

from control_plane.accounts.services import api_key_create
from control_plane.inference.custom_voices import archive_conditioning
from control_plane.inference.models import Artifact, CustomVoice, InferenceRequest
from control_plane.openai_compat.transcription_inputs import decode
from stages.tensors import to_numpy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(1500),  # building, deploying and speaking with the tiny omni on a loaded machine
]

# A greedy talker speaks the same codes for the same request, and code2wav decodes them in one window
# (its first window waits for more codes than the talker makes): audio differs only by the voice.
VOCODER_OUT = "token2wav.code2wav_bigvgan_model.conv_post.weight"
GREEDY = {"stages": {"talker": {"sampling": {"max_tokens": 24, "temperature": 0.0}},
                     "code2wav": {"first_chunk_size": 64, "async_chunk_size": 64}}}  # fmt: skip


@pytest.fixture(scope="module")
def loud_tiny_omni(tiny_omni, tmp_path_factory):
    """The tiny Qwen2.5-Omni with its vocoder's last convolution scaled up: its random weights make audio
    around 1e-8, which 16-bit audio (what the API sends) rounds to silence; scaled, voices can be told apart."""
    import shutil

    from safetensors.numpy import load_file, save_file

    loud = tmp_path_factory.mktemp("loud") / "qwen2_5_omni"
    shutil.copytree(tiny_omni, loud)
    tensors = load_file(str(loud / "model.safetensors"))
    tensors[VOCODER_OUT] = tensors[VOCODER_OUT] * np.float32(1e7)
    save_file(tensors, str(loud / "model.safetensors"), metadata={"format": "pt"})
    return loud


def wav_clip(seconds: float, rate: int = 16000, f0: float = 180.0) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * f0 * (t + 0.02 * np.sin(2 * np.pi * 3 * t))
    signal = 0.2 * sum(np.sin(k * phase) / k for k in range(1, 9))
    buffer = io.BytesIO()
    soundfile.write(buffer, signal.astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def test_a_custom_voice_speaks_for_its_owner_only(serving_stack, loud_tiny_omni, django_user_model):
    tiny_omni = loud_tiny_omni
    serving_stack.deploy("omni", "qwen2_5_omni", model_dir=str(tiny_omni), deploy_config=GREEDY)
    serving_stack.deploy("echo-voice", "echo-voice")
    serving_stack.wait_running("omni", "echo-voice", timeout=600)
    client = serving_stack.client(timeout=300)
    clip = wav_clip(4.0)

    made = client.audio.voices.create(audio_sample=("me.wav", clip, "audio/wav"), consent="cons_1", name="mine",
                                      model="omni")  # fmt: skip
    assert (made.object, made.name, made.type) == ("audio.voice", "mine", "audio_sample") and made.id

    listed = client.get("/audio/voices", cast_to=object, options={"params": {"model": "omni"}})
    assert listed["voices"] == ["Chelsie", "Ethan", "mine"] and listed["reference_voices"] is True
    assert listed["data"][2]["id"] == made.id and listed["data"][2]["type"] == "audio_sample"

    # What was stored (and what requests naming the voice carry) is the derivation of the decoded clip.
    from stages.models.qwen2_5_voice_reference import derive

    voice = CustomVoice.objects.get(name="mine")
    artifacts = {a.kind: a for a in Artifact.objects.filter(request=voice.request)}
    assert set(artifacts) == {"audio", "conditioning"} and voice.request.route == "audio.voices"
    assert artifacts["audio"].file.read() == clip
    stored = archive_conditioning(artifacts["conditioning"].file.read())
    samples, rate, _ = decode(clip)
    expected = derive(str(tiny_omni), samples, rate)
    assert (stored.bos_token, stored.nearest) == (expected.bos_token, expected.nearest) == (
        expected.bos_token, voice.nearest_voice)  # fmt: skip
    np.testing.assert_allclose(to_numpy(stored.ref_mel), to_numpy(expected.ref_mel), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(to_numpy(stored.cond), to_numpy(expected.cond))

    def chat_audio(voice_name: str, chat_client=client) -> bytes:
        reply = chat_client.chat.completions.create(
            model="omni", messages=[{"role": "user", "content": "Say hello."}], max_tokens=6, seed=11,
            modalities=["text", "audio"], audio={"voice": voice_name, "format": "wav"},
        )  # fmt: skip
        return base64.b64decode(reply.choices[0].message.audio.data)

    default, again, custom = chat_audio("Chelsie"), chat_audio("chelsie"), chat_audio("mine")
    assert default == again  # deterministic for one voice...
    assert custom[:4] == b"RIFF" and np.abs(np.frombuffer(default[44:], "<i2")).max() > 100  # not silence
    assert custom != default  # ...and another voice speaks differently

    def speech(voice_name: str, speech_client=client) -> bytes:
        return speech_client.audio.speech.create(model="omni", input="hello there", voice=voice_name,
                                                 response_format="wav", extra_body={"seed": 11}).content  # fmt: skip

    spoken = speech("mine")
    assert spoken[:4] == b"RIFF" and spoken != speech("Chelsie")

    # Another user does not see it: the 400 that lists the valid voices (the built-in ones only).
    other = django_user_model.objects.create_user("voices-other", password="x")
    _, other_secret = api_key_create(user=other, name="other", scopes=["inference"])
    stranger = serving_stack.client(other_secret, timeout=300)
    for attempt in (lambda: chat_audio("mine", stranger), lambda: speech("mine", stranger)):
        with pytest.raises(openai.BadRequestError) as refused:
            attempt()
        assert refused.value.body["param"] == "voice" and refused.value.body["code"] == "invalid_voice"
        assert "Chelsie" in refused.value.body["message"] and "'mine'" in refused.value.body["message"]
        assert "['Chelsie', 'Ethan']" in refused.value.body["message"]
    theirs = stranger.get("/audio/voices", cast_to=object, options={"params": {"model": "omni"}})
    assert theirs["voices"] == ["Chelsie", "Ethan"]
    with pytest.raises(openai.NotFoundError):
        stranger.audio.voices.delete("mine")

    # Refusals, in OpenAI's error shape.
    def refused_create(expected, content: bytes, name: str = "other", model: str = "omni") -> dict:
        with pytest.raises(expected) as refused:
            client.audio.voices.create(audio_sample=("x.wav", content, "audio/wav"), consent="c", name=name,
                                       model=model)  # fmt: skip
        body = refused.value.response.json()["error"]
        assert set(body) == {"message", "type", "param", "code"}
        return body

    assert refused_create(openai.BadRequestError, b"not audio at all")["code"] == "invalid_audio"
    assert refused_create(openai.BadRequestError, wav_clip(0.4))["code"] == "audio_too_short"
    short = refused_create(openai.BadRequestError, wav_clip(2.0))  # under the 3 s of the model's reference mel
    assert short["code"] == "audio_too_short" and "at least 3 s" in short["message"]
    too_long = refused_create(openai.BadRequestError, wav_clip(31.0, rate=8000))
    assert (too_long["code"], too_long["param"]) == ("audio_too_long", "file")
    assert refused_create(openai.BadRequestError, clip, model="echo-voice")["code"] == "voice_reference_unsupported"
    assert refused_create(openai.ConflictError, clip, name="mine")["code"] == "voice_exists"
    assert refused_create(openai.BadRequestError, clip, name="Ethan")["param"] == "name"

    # Deleting it makes it unknown, with its clip and conditioning gone.
    files = [artifact.file.name for artifact in artifacts.values()]
    deleted = client.audio.voices.delete("mine")
    assert deleted.deleted and deleted.id == made.id and deleted.object == "audio.voice.deleted"
    assert not CustomVoice.objects.exists() and not InferenceRequest.objects.filter(route="audio.voices").exists()
    storage = Artifact._meta.get_field("file").storage
    assert not any(storage.exists(name) for name in files)
    with pytest.raises(openai.BadRequestError) as refused:
        chat_audio("mine")
    assert refused.value.body["param"] == "voice"
    with pytest.raises(openai.NotFoundError):
        client.audio.voices.delete("mine")
