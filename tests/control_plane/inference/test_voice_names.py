"""OpenAI's voice names reach the stages unchanged (the model refuses them, listing its voices) unless
the deployment maps them to its default voice; the model's own names always pass."""

from __future__ import annotations

from control_plane.inference.voice_names import resolve_voice
from stages.config import load_deploy_config


def test_openai_voice_names_map_only_when_the_deployment_says_so():
    strict, mapping = load_deploy_config({}), load_deploy_config({"map_openai_voices": True})
    assert resolve_voice(strict, "alloy") == "alloy"
    assert resolve_voice(mapping, "alloy") is None and resolve_voice(mapping, "Verse") is None
    assert resolve_voice(mapping, "Ethan") == "Ethan" and resolve_voice(mapping, None) is None
