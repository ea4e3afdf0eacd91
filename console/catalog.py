"""What the catalog offers: the pipelines users deploy, found by name, description or the names
of their family's registered models, and by the modality they output. Internal pipelines (the echo test family) stay deployable by URL and
through the API, but are not offered here."""

from __future__ import annotations

from dataclasses import dataclass

from console.graph import stage_graph
from control_plane.deployments.queries import pipeline_list
from control_plane.deployments.services import pipeline_config_of
from control_plane.registry.queries import models_by_family

MODALITIES = ("text", "audio", "image", "video")


@dataclass(frozen=True)
class CatalogQuery:
    text: str = ""
    modality: str = ""

    @classmethod
    def from_params(cls, params) -> CatalogQuery:
        modality = params.get("modality", "")
        return cls(text=params.get("q", "").strip(), modality=modality if modality in MODALITIES else "")


def _matches(pipeline, config, models: list, query: CatalogQuery) -> bool:
    if config.internal:
        return False
    if query.modality and query.modality not in config.output_modalities:
        return False
    names = " ".join(model.name for model in models)
    haystack = f"{pipeline.name} {pipeline.family} {pipeline.variant} {pipeline.description} {names}".lower()
    return all(word in haystack for word in query.text.lower().split())


def catalog_families(query: CatalogQuery) -> dict[str, list[dict]]:
    """The matching pipelines grouped by family, each with its config, stage graph and the
    registry's checkpoints of its family."""
    families: dict[str, list[dict]] = {}
    models = models_by_family()
    for pipeline in pipeline_list():
        config = pipeline_config_of(pipeline)
        family_models = models.get(pipeline.family, [])
        if _matches(pipeline, config, family_models, query):
            entry = {"pipeline": pipeline, "config": config, "graph": stage_graph(config), "models": family_models}
            families.setdefault(pipeline.family, []).append(entry)
    return families
