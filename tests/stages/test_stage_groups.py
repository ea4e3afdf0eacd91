"""Stage groups in the deploy config: which stages form a group, what leaves it, and the errors
that name the offending `group` field."""

from __future__ import annotations

import pytest

from stages.config import dump_yaml, load_deploy_config
from stages.echo import family as echo_family
from stages.errors import ConfigError
from stages.groups import StageGroups
from stages.models import get_family

OMNI = get_family("qwen2_5_omni").pipeline
VOICE = echo_family.pipeline_named("voice")


def groups_of(pipeline, stages: dict) -> StageGroups:
    return StageGroups(pipeline, load_deploy_config({"stages": stages}, pipeline))


def test_the_whole_omni_chain_in_one_group_sends_back_text_and_audio_only():
    groups = groups_of(OMNI, {name: {"group": "omni"} for name in ("thinker", "talker", "code2wav")})
    group = groups.groups["omni"]
    assert group.members == (0, 1, 2)
    assert group.entry == 0
    assert group.published == {0, 2}  # the talker's codes never leave
    assert group.leaving == set()
    assert all(groups.internal(edge) for edge in OMNI.edges)


def test_a_group_after_the_entry_stage_is_entered_by_its_first_member():
    groups = groups_of(OMNI, {"talker": {"group": "speech"}, "code2wav": {"group": "speech"}})
    group = groups.groups["speech"]
    assert (group.entry, group.members, group.published) == (1, (1, 2), {2})
    assert groups.of(0) is None
    assert [groups.internal(edge) for edge in OMNI.edges] == [False, True]


def test_a_member_with_an_edge_out_of_the_group_sends_its_payloads_out():
    group = groups_of(OMNI, {"thinker": {"group": "g"}, "talker": {"group": "g"}}).groups["g"]
    assert group.published == {0, 1}
    assert group.leaving == {1}


def test_stages_without_a_group_make_no_groups():
    assert not groups_of(OMNI, {"thinker": {"replicas": 2}})


def test_the_group_setting_round_trips_through_yaml():
    deploy = load_deploy_config({"stages": {"echo": {"group": "g"}, "voice": {"group": "g"}}}, VOICE)
    assert load_deploy_config(dump_yaml(deploy), VOICE) == deploy


@pytest.mark.parametrize(
    ("stages", "field", "words"),
    [
        ({"talker": {"group": "solo"}}, "stages.talker.group", "at least two"),
        (
            {"talker": {"group": "g", "device": "cuda:0"}, "code2wav": {"group": "g", "device": "cuda:1"}},
            "stages.talker.group",
            "one device",
        ),
        ({"talker": {"group": "g", "pool": "gpu"}, "code2wav": {"group": "g"}}, "stages.talker.group", "one pool"),
        ({"talker": {"group": "g", "replicas": 2}, "code2wav": {"group": "g"}}, "stages.talker.group", "one replicas"),
        ({"thinker": {"group": "g"}, "code2wav": {"group": "g"}}, "stages.thinker.group", "exactly one stage"),
        ({"talker": {"group": "a b"}}, "stages.talker.group", "letters, digits"),
    ],
)
def test_invalid_groups_name_the_group_field(stages, field, words):
    with pytest.raises(ConfigError) as caught:
        load_deploy_config({"stages": stages}, OMNI)
    assert caught.value.field == field
    assert words in caught.value.message
