"""`python -m stages.models`: every registered family's pipelines as JSON, one item per
variant: {"name", "family", "variant", "description", "config"} (config: the
PipelineConfig as builtins). The control plane reads this in a subprocess, so it never
imports the families (or torch) itself. Families whose module is not there yet are skipped."""

from __future__ import annotations

import json
import sys

from stages.config import to_dict
from stages.errors import ConfigError
from stages.models import FAMILIES, get_family


def list_pipelines() -> list[dict]:
    items = []
    for family_name in FAMILIES:
        try:
            family = get_family(family_name)
        except ConfigError as error:
            print(f"skipping {family_name}: {error}", file=sys.stderr)
            continue
        for variant, pipeline in family.pipelines.items():
            items.append(
                {
                    "name": pipeline.name,
                    "family": family_name,
                    "variant": variant,
                    "description": pipeline.description,
                    "config": to_dict(pipeline),
                }
            )
    return items


if __name__ == "__main__":
    json.dump(list_pipelines(), sys.stdout, indent=1)
    sys.stdout.write("\n")
