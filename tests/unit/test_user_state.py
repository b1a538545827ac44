"""The Redis keys and arguments of the users' state (moderator/users/state.py), pinned: instances of
two versions share these keys during a rolling deploy, so a renamed key would reset every user's
strikes, mutes, floods and repeats. That the Lua script and the per-process state decide alike is
tests/integration/test_users.py.
"""

from __future__ import annotations

from moderator.users.state import Seen, Strike, after_call, before_call

USER = "moderator:user:{u-1}"  # {u-1}: every key of one user in one cluster slot


def test_the_before_step_reads_mutes_and_counts_floods_and_repeats_under_the_users_keys() -> None:
    seen = Seen("u-1", "c-1", "m-1", 100_000, 5, 10_000, 3, 60_000, "d1g3st")
    keys, args = before_call([seen])
    assert keys == [f"{USER}:mute", f"{USER}:mute:c-1", f"{USER}:flood", f"{USER}:repeat:d1g3st"]
    # each window's lower bound is exclusive; the keys outlive the longer window by a minute
    assert args == ["before", "100000", "m-1", "5", "(90000", "120000", "3", "(40000", "c-1"]


def test_a_strike_is_counted_under_the_user_and_mutes_in_the_policys_scope() -> None:
    everywhere = Strike("u-1", "c-1", "m-1", 100_000, True, 2, 30_000, 5_000, False)
    here = everywhere._replace(message_id="m-2", mute_channel=True)
    keys, args = after_call([everywhere, here])
    assert keys == [f"{USER}:strikes", f"{USER}:mute", f"{USER}:strikes", f"{USER}:mute:c-1"]
    assert args[:8] == ["after", "100000", "m-1", "1", "2", "(70000", "90000", "105000"]


def test_an_allowed_message_without_a_mute_rule_is_no_strike_and_mutes_nobody() -> None:
    allowed = Strike("u-1", "c-1", "m-1", 100_000, False, 2, 30_000, 0, False)
    _, args = after_call([allowed])
    assert args == ["after", "100000", "m-1", "0", "2", "(70000", "90000", "0"]
