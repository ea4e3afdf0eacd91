"""The history writer's row statements as prepared SQL: a batch writes hundreds of rows, and
building and compiling a queryset (or a bulk_create) per row cost the writer more than the
database's work. Values are converted by the model's own fields (`get_db_prep_save`), so they
are stored exactly as the ORM would store them, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import functools
from typing import Any

from django.db import connections, models, router

from control_plane.inference.models import FINAL_STATUSES, InferenceRequest


def insert_unless_present(model: type[models.Model], values: dict[str, Any]) -> bool:
    """Insert one row of `values` (by attname; other fields at their defaults) unless it
    conflicts with a row already there (its key or a unique field): True when it was inserted."""
    connection = connections[router.db_for_write(model)]
    fields = _insert_fields(model)
    with connection.cursor() as cursor:
        cursor.execute(_insert_statement(model, connection.alias), _row_params(fields, values, connection))
        return cursor.rowcount == 1


def insert_all_unless_present(model: type[models.Model], rows: list[dict[str, Any]]) -> None:
    """`insert_unless_present` for many rows in one call."""
    if not rows:
        return
    connection = connections[router.db_for_write(model)]
    fields = _insert_fields(model)
    with connection.cursor() as cursor:
        cursor.executemany(
            _insert_statement(model, connection.alias), [_row_params(fields, row, connection) for row in rows]
        )


def close_unless_final(row_id: str, values: dict[str, Any]) -> bool:
    """Set `values` on the history row unless it is final already (the first ending wins): True
    when this closed it."""
    connection = connections[router.db_for_write(InferenceRequest)]
    meta = InferenceRequest._meta
    params = [meta.get_field(name).get_db_prep_save(value, connection) for name, value in values.items()]
    params.append(meta.pk.get_db_prep_value(meta.pk.to_python(row_id), connection))
    with connection.cursor() as cursor:
        cursor.execute(_close_statement(connection.alias, tuple(values)), [*params, *FINAL_STATUSES])
        return cursor.rowcount == 1


def _insert_fields(model: type[models.Model]) -> list[models.Field]:
    return [field for field in model._meta.concrete_fields if not isinstance(field, models.AutoField)]


def _row_params(fields: list[models.Field], values: dict[str, Any], connection) -> list[Any]:
    return [
        field.get_db_prep_save(values[field.attname] if field.attname in values else field.get_default(), connection)
        for field in fields
    ]


@functools.cache
def _insert_statement(model: type[models.Model], alias: str) -> str:
    quote = connections[alias].ops.quote_name
    columns = [field.column for field in _insert_fields(model)]
    return (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(column) for column in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT DO NOTHING"
    )


@functools.cache
def _close_statement(alias: str, names: tuple[str, ...]) -> str:
    quote = connections[alias].ops.quote_name
    meta = InferenceRequest._meta
    assignments = ", ".join(f"{quote(meta.get_field(name).column)} = %s" for name in names)
    finals = ", ".join(["%s"] * len(FINAL_STATUSES))
    return (
        f"UPDATE {quote(meta.db_table)} SET {assignments} "
        f"WHERE {quote(meta.pk.column)} = %s AND {quote(meta.get_field('status').column)} NOT IN ({finals})"
    )
