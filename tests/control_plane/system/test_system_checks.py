from django.core.checks import run_checks
from django.test import override_settings


def check_ids() -> set[str]:
    return {message.id for message in run_checks()}


def test_configuration_passes_our_checks():
    assert not {i for i in check_ids() if i.startswith("omnistage.")}


def test_an_app_without_a_migration_module_fails_the_check(settings):
    modules = {label: path for label, path in settings.MIGRATION_MODULES.items() if label != "accounts"}
    with override_settings(MIGRATION_MODULES=modules):
        assert "omnistage.E001" in check_ids()


def test_visibility_timeout_must_outlast_the_longest_task(settings):
    with override_settings(CELERY_BROKER_TRANSPORT_OPTIONS={"visibility_timeout": 60}, LONGEST_TASK_S=600):
        assert "omnistage.E002" in check_ids()


def test_prefetch_multiplier_must_be_one():
    with override_settings(CELERY_WORKER_PREFETCH_MULTIPLIER=4):
        assert "omnistage.E003" in check_ids()
