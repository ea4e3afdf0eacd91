"""`python -m stages.models.voices FAMILY MODEL_DIR`: the voices a family's checkpoint speaks with,
as JSON {"voices": [...], "default_voice": ..., "reference_voices": bool, "reference_min_s": float}
(whether custom voices can be made from a reference clip, `python -m stages.models.voice_reference`,
and the shortest clip it takes). The control plane runs it in a subprocess (reading some
checkpoints' voices needs torch, which it never imports); exit status 2 with the reason on stderr
when the checkpoint cannot be read."""

from __future__ import annotations

import json
import sys

from stages.errors import ConfigError
from stages.models import get_family


def published_voices(family_name: str, model_dir: str) -> dict:
    family = get_family(family_name)
    voices = family.voices(model_dir)
    default = family.default_voice if voices else None
    if default is not None:  # the checkpoint's own spelling of it
        default = next((name for name in voices if name.lower() == default.lower()), default)
    return {
        "voices": voices,
        "default_voice": default,
        "reference_voices": bool(voices and family.takes_voice_reference),
        "reference_min_s": family.voice_reference_min_s(model_dir) if voices and family.takes_voice_reference else 0.0,
    }


if __name__ == "__main__":
    try:
        json.dump(published_voices(sys.argv[1], sys.argv[2]), sys.stdout)
    except (ConfigError, OSError, ValueError) as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(2)
