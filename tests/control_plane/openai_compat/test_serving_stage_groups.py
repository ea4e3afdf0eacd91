"""The tiny Qwen2.5-Omni with thinker, talker and code2wav in one stage group (one replica host
process) answers a greedy request with the same text and the same audio as the same model
deployed one replica host per stage."""

from __future__ import annotations

import base64

import pytest
from procs import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.live,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("repo_tiny_models"),
]

OMNI_DIR = str(REPO / "var" / "models" / "qwen2_5_omni")
GREEDY_TALKER = {"sampling": {"max_tokens": 40, "temperature": 0.0}}
UNGROUPED = {"stages": {"talker": GREEDY_TALKER}}
GROUPED = {
    "stages": {
        "thinker": {"group": "omni"},
        "talker": {**GREEDY_TALKER, "group": "omni"},
        "code2wav": {"group": "omni"},
    }
}


def test_one_group_answers_like_one_host_per_stage(serving_stack):
    serving_stack.deploy("omni-split", "qwen2_5_omni", model_dir=OMNI_DIR, deploy_config=UNGROUPED)
    created = serving_stack.deploy("omni-group", "qwen2_5_omni", model_dir=OMNI_DIR, deploy_config=GROUPED)
    assert [(r["stage"], r["group"], r["members"]) for r in created["replicas"]] == [
        ("thinker", "omni", ["thinker", "talker", "code2wav"])
    ]
    serving_stack.wait_running("omni-split", "omni-group", timeout=600)
    client = serving_stack.client(timeout=300)

    def answer(model: str):
        completion = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=12,
            temperature=0,
            modalities=["text", "audio"],
            audio={"voice": "Chelsie", "format": "wav"},
        )
        message = completion.choices[0].message
        return message.audio.transcript or message.content, base64.b64decode(message.audio.data)

    split_text, split_audio = answer("omni-split")
    group_text, group_audio = answer("omni-group")
    assert split_text and len(split_audio) > 1000
    assert group_text == split_text
    assert group_audio == split_audio

    text_only = client.chat.completions.create(
        model="omni-group", messages=[{"role": "user", "content": "Say hello."}], max_tokens=6, modalities=["text"]
    )
    assert text_only.choices[0].message.content and text_only.choices[0].message.audio is None
