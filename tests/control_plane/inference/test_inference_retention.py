"""History retention runs by itself: the orchestrator deletes requests older than
HISTORY_RETENTION_DAYS, with their artifact files, once per HISTORY_CLEANUP_INTERVAL_S, and
only one orchestrator runs each period (a lease in Redis)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import redis
from procs import PYTHON, Proc, RedisServer, wait_for

from control_plane.inference import retention
from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.retention_schedule import RetentionSchedule, retention_lease
from control_plane.inference.services import artifact_add, request_close, request_open

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def private_redis(tmp_path, settings):
    server = RedisServer(tmp_path / "redis").start()
    settings.REDIS_URL = server.url  # the rows' metrics go there too, not to a shared server
    yield server
    server.stop()


@pytest.fixture
def media_root(tmp_path, settings) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def history_row(request_id: str, *, age_days: float, status: str = Status.COMPLETED) -> tuple[str, Path]:
    """A request of `age_days` ago with one audio artifact on disk: (request id, file path)."""
    row = request_open(request_id=request_id, route=Route.CHAT, inputs={"prompt": request_id}, status=Status.RUNNING)
    artifact = artifact_add(
        row, kind="audio", data=b"RIFF" + request_id.encode(), mime_type="audio/wav", extension="wav"
    )
    if status != Status.RUNNING:
        request_close(row, status=status, http_status=200 if status == Status.COMPLETED else 500)
    InferenceRequest.objects.filter(pk=row.pk).update(created_at=row.created_at - timedelta(days=age_days))
    path = Path(artifact.file.path)
    assert path.exists()
    return request_id, path


def gone(request_id: str, path: Path) -> bool:
    return not InferenceRequest.objects.filter(request_id=request_id).exists() and not path.exists()


def kept(request_id: str, path: Path) -> bool:
    return InferenceRequest.objects.filter(request_id=request_id).exists() and path.exists()


@pytest.mark.slow
def test_the_orchestrator_deletes_old_history_every_period(platform_env, tmp_path, private_redis, media_root):
    old = [history_row("old-completed", age_days=31), history_row("old-failed", age_days=90, status=Status.FAILED)]
    recent = history_row("recent", age_days=1)
    still_running = history_row("old-but-running", age_days=31, status=Status.RUNNING)
    env = {
        **platform_env,
        "REDIS_URL": private_redis.url,
        "OMNISTAGE_MEDIA_ROOT": str(media_root),
        "OMNISTAGE_HISTORY_RETENTION_DAYS": "30",
        "OMNISTAGE_HISTORY_CLEANUP_INTERVAL_S": "2",
    }
    orchestrator = Proc([PYTHON, "manage.py", "orchestrator"], env, tmp_path / "orchestrator.log")
    try:
        wait_for(lambda: all(gone(*row) for row in old), timeout=120, interval=0.3, what="the first cleanup")
        assert kept(*recent) and kept(*still_running)

        # a row that ages past the window after that run goes in a later period
        later = history_row("old-after-the-first-run", age_days=45)
        wait_for(lambda: gone(*later), timeout=120, interval=0.3, what="a later cleanup")
        assert kept(*recent) and kept(*still_running)
    except (TimeoutError, AssertionError):
        print(orchestrator.output())
        raise
    finally:
        orchestrator.stop()


def test_one_process_runs_each_period_under_the_lease(private_redis, media_root):
    client = redis.Redis.from_url(private_redis.url)
    runs: list[str] = []

    def schedule(owner: str) -> RetentionSchedule:
        def counted_cleanup() -> int:
            runs.append(owner)
            return retention.cleanup()

        return RetentionSchedule(client, owner, interval_s=1.0, cleanup=counted_cleanup)

    first, second = schedule("orchestrator-a"), schedule("orchestrator-b")
    old = history_row("old", age_days=31)
    first.poll().join(timeout=30)
    assert runs == ["orchestrator-a"] and gone(*old)
    assert second.poll() is None  # the period is first's
    assert client.get(retention_lease()) == b"orchestrator-a"

    started = wait_for(second.poll, timeout=30, interval=0.1, what="the next period's lease")
    started.join(timeout=30)
    assert runs == ["orchestrator-a", "orchestrator-b"]
    assert client.get(retention_lease()) == b"orchestrator-b"


def test_a_redis_outage_skips_the_period_without_raising(media_root):
    unreachable = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    schedule = RetentionSchedule(unreachable, "orchestrator-a", interval_s=1.0)
    assert schedule.poll() is None


def test_retention_zero_keeps_everything(media_root, settings):
    settings.HISTORY_RETENTION_DAYS = 0
    row = history_row("ancient", age_days=3650)
    assert retention.cleanup() == 0 and kept(*row)


def test_a_custom_voices_row_outlives_retention(media_root, django_user_model):
    from control_plane.inference.models import CustomVoice

    owner = django_user_model.objects.create_user("voice-owner", password="x")
    voice_row, voice_file = history_row("voice_1", age_days=400)
    CustomVoice.objects.create(user=owner, name="mine", family="qwen2_5_omni", model_dir="/m", deployment_name="omni",
                               request=InferenceRequest.objects.get(request_id="voice_1"))  # fmt: skip
    old = history_row("old-chat", age_days=400)
    assert retention.cleanup() == 1
    assert gone(*old) and kept(voice_row, voice_file) and CustomVoice.objects.filter(name="mine").exists()
