"""What the catalog offers: the pipelines users deploy, found by name or description and by
the modality they output. Internal pipelines (the echo test family) stay deployable by URL and
through the API, but are not offered here."""

from __future__ import annotations

from dataclasses import dataclass

from console.graph import stage_graph
from control_plane.deployments.queries import pipeline_list
from control_plane.deployments.services import pipeline_config_of

MODALITIES = ("text", "audio", "image", "video")


@dataclass(frozen=True)
class CatalogQuery:
    text: str = ""
    modality: str = ""

    @classmethod
    def from_params(cls, params) -> CatalogQuery:
        modality = params.get("modality", "")
        return cls(text=params.get("q", "").strip(), modality=modality if modality in MODALITIES else "")


def _matches(pipeline, config, query: CatalogQuery) -> bool:
    if config.internal:
        return False
    if query.modality and query.modality not in config.output_modalities:
        return False
    haystack = f"{pipeline.name} {pipeline.family} {pipeline.variant} {pipeline.description}".lower()
    return all(word in haystack for word in query.text.lower().split())


def catalog_families(query: CatalogQuery) -> dict[str, list[dict]]:
    """The matching pipelines grouped by family, each with its config and stage graph."""
    families: dict[str, list[dict]] = {}
    for pipeline in pipeline_list():
        config = pipeline_config_of(pipeline)
        if _matches(pipeline, config, query):
            entry = {"pipeline": pipeline, "config": config, "graph": stage_graph(config)}
            families.setdefault(pipeline.family, []).append(entry)
    return families
