"""A policy's rules for users (its `[users]` table): strikes, mute, flood, repeats and links.

Every rule is off unless the policy sets it. The policy of the channel where a message is
posted decides what that message does to its user's state and what the state does to it
(moderator/users/escalation.py applies the rules; moderator/users/state.py keeps the state).

Links are found by linkify-it-py (the port of markdown-it's linkify-it): it knows where a URL
ends in prose (trailing punctuation, brackets), finds schemeless `www.` and bare domains with a
known top-level domain, and handles internationalised names, which a hand-written regex gets
wrong one way or another. Its fuzzy matching knows the common and two-letter top-level
domains; the top-level domains of a policy's own lists are added, so a listed domain is found
written bare too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from linkify_it import LinkifyIt

from moderator.errors import PolicyError

MAX_WINDOW_S = 7 * 24 * 3600  # a week: longer windows would keep a user's state for too long
MUTE_SCOPES = ("all", "channel")
INT_KEYS = {  # key -> what it means, for errors
    "strikes": "flagged messages within strike_window_s before the next is escalated",
    "strike_window_s": "seconds a strike counts",
    "mute_s": "seconds an escalated user is muted",
    "flood_messages": "messages within flood_window_s a user may send",
    "flood_window_s": "seconds of the flood window",
    "repeat_channels": "channels the same text may be posted in within repeat_window_s",
    "repeat_window_s": "seconds of the repeat window",
}
ACTION_KEYS = ("flood_action", "repeat_action", "link_action")
LIST_KEYS = ("links_allow", "links_deny")
KEYS = (*INT_KEYS, "mute_scope", *ACTION_KEYS, *LIST_KEYS)
# Without a window of its own, a rule counts over this many seconds.
DEFAULT_WINDOWS_S = {"strike_window_s": 3600, "flood_window_s": 10, "repeat_window_s": 60}


@dataclass(frozen=True, slots=True)
class UserRules:
    """One policy's user rules; a count of 0 turns its rule off."""

    strikes: int = 0
    strike_window_s: int = DEFAULT_WINDOWS_S["strike_window_s"]
    mute_s: int = 0
    mute_scope: str = "all"
    flood_messages: int = 0
    flood_window_s: int = DEFAULT_WINDOWS_S["flood_window_s"]
    flood_action: str = "block"
    repeat_channels: int = 0
    repeat_window_s: int = DEFAULT_WINDOWS_S["repeat_window_s"]
    repeat_action: str = "block"
    link_action: str = "block"
    links_allow: tuple[str, ...] = ()
    links_deny: tuple[str, ...] = ()
    _linkify: LinkifyIt | None = field(default=None, compare=False, repr=False)

    @property
    def on(self) -> bool:
        """Any rule on: the message's user is looked up."""
        return bool(self.strikes or self.flood_messages or self.repeat_channels or self.links)

    @property
    def links(self) -> bool:
        return bool(self.links_allow or self.links_deny)

    def link_domain(self, text: str) -> str | None:
        """The first domain in `text` the lists refuse: on the deny list (or under a listed
        domain), or, when there is an allow list, not on it; None when every link passes."""
        if self._linkify is None or not self._linkify.test(text):
            return None
        for match in self._linkify.match(text) or ():
            if match.schema == "mailto:":  # an address, not a link
                continue
            domain = host_of(match.url)
            if not domain:
                continue
            if _under(domain, self.links_deny):
                return domain
            if self.links_allow and not _under(domain, self.links_allow):
                return domain
        return None


def host_of(url: str) -> str:
    """The lower-case host of a URL linkify-it found (scheme, credentials, port and path cut
    off; a trailing dot too), IDNA-decoded names as written."""
    rest = url.partition("//")[2] if "//" in url else url
    host = rest.partition("/")[0].partition("?")[0].partition("#")[0].rpartition("@")[2]
    if host.startswith("["):  # an IPv6 address
        return host.partition("]")[0] + "]"
    return host.partition(":")[0].rstrip(".").lower()


def _under(domain: str, listed: Sequence[str]) -> bool:
    """`domain` is a listed domain or a subdomain of one."""
    return any(domain == d or domain.endswith("." + d) for d in listed)


def user_rules(spec: object, actions: Sequence[str], where: str) -> UserRules:
    """The `[users]` table of a policy whose actions are `actions` (allow first), checked."""
    if spec is None:
        return UserRules()
    if not isinstance(spec, Mapping):
        raise PolicyError(f"{where} must be a table")
    unknown = sorted(set(spec) - set(KEYS))
    if unknown:
        raise PolicyError(f"{where} may only set {', '.join(KEYS)} (not {', '.join(unknown)})")
    values: dict[str, Any] = {}
    for key, meaning in INT_KEYS.items():
        if key not in spec:
            continue
        value = spec[key]
        top = MAX_WINDOW_S if key.endswith("_s") else 1_000_000
        if type(value) is not int or not 0 <= value <= top:
            raise PolicyError(f"{where}.{key} ({meaning}) must be an integer in 0..{top}")
        if key in DEFAULT_WINDOWS_S and value == 0:
            raise PolicyError(f"{where}.{key} ({meaning}) must be at least 1")
        values[key] = value
    scope = spec.get("mute_scope", "all")
    if scope not in MUTE_SCOPES:
        raise PolicyError(f"{where}.mute_scope must be one of {', '.join(MUTE_SCOPES)}")
    values["mute_scope"] = scope
    strongest = "block" if "block" in actions else actions[-1]
    for key in ACTION_KEYS:
        action = spec.get(key, strongest)
        if action not in actions[1:]:
            raise PolicyError(f"{where}.{key}: {action!r} is not one of {', '.join(actions[1:])}")
        values[key] = action
    for key in LIST_KEYS:
        listed = spec.get(key, [])
        if not isinstance(listed, list) or not all(
            isinstance(d, str) and "." in d.strip(". ") for d in listed
        ):
            raise PolicyError(f"{where}.{key} must be a list of domains (`example.com`)")
        values[key] = tuple(d.strip(". ").lower() for d in listed)
    rules = UserRules(**values)
    if rules.links:
        linkify = LinkifyIt()
        tlds = {d.rpartition(".")[2] for d in (*rules.links_allow, *rules.links_deny)}
        linkify.tlds(sorted(tlds), True)
        rules = UserRules(**values, _linkify=linkify)
    return rules


def escalated(action: str, actions: Sequence[str]) -> str:
    """One step up the policy's ladder (`nudge` → `review` → `block`); the top stays, and so
    does an action the policy does not list (a degraded decision's `block`)."""
    if action not in actions:
        return action
    return actions[min(actions.index(action) + 1, len(actions) - 1)]


def rules_of(policy_spec: Mapping[str, Any], actions: Sequence[str], where: str) -> UserRules:
    """The user rules in a policy's spec (what rules.Policy reads)."""
    return user_rules(policy_spec.get("users"), actions, f"{where}: users")
