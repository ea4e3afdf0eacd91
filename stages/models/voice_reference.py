"""`python -m stages.models.voice_reference FAMILY MODEL_DIR SAMPLE_RATE`: a custom voice's
conditioning from a reference clip. Reads the clip on stdin (mono float32 little-endian samples at
SAMPLE_RATE), writes the conditioning on stdout as an .npz archive (`bos_token`, `cond`, `ref_mel`,
`nearest`). The control plane runs it in a subprocess (deriving it needs torch, which it never
imports). Exit status 3 with the reason on stderr when the family cannot take a reference clip,
2 when the checkpoint or the clip cannot be read."""

from __future__ import annotations

import io
import sys

import numpy as np

from stages.errors import ConfigError
from stages.models import get_family
from stages.tensors import to_numpy
from stages.voice_conditioning import VoiceConditioning

CANNOT = 3


def conditioning_archive(conditioning: VoiceConditioning) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, bos_token=np.int64(conditioning.bos_token), cond=to_numpy(conditioning.cond),
             ref_mel=to_numpy(conditioning.ref_mel), nearest=np.str_(conditioning.nearest))  # fmt: skip
    return buffer.getvalue()


def main(family_name: str, model_dir: str, sample_rate: str) -> int:
    family = get_family(family_name)
    if not family.takes_voice_reference:
        print(f"the {family_name} family cannot make a voice from a reference clip", file=sys.stderr)
        return CANNOT
    samples = np.frombuffer(sys.stdin.buffer.read(), dtype="<f4")
    conditioning = family.voice_reference(model_dir, samples, int(sample_rate))
    sys.stdout.buffer.write(conditioning_archive(conditioning))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(*sys.argv[1:4]))
    except (ConfigError, OSError, ValueError) as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(2)
