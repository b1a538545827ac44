"""The host a link rule judges (moderator/policy/user_rules.py `host_of`): whatever a link
carries around its host, the lists see the host alone, so `evil.com` on a deny list is not
dodged by a scheme, credentials, a port, a path, a query, a fragment, a trailing dot or capitals.
"""

from __future__ import annotations

import pytest

from moderator.policy.user_rules import host_of


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("evil.com", "evil.com"),
        ("https://Evil.COM", "evil.com"),
        ("http://evil.com/a/b", "evil.com"),
        ("//evil.com/x", "evil.com"),
        ("evil.com?next=/home", "evil.com"),
        ("evil.com#top", "evil.com"),
        ("evil.com#a?b/c", "evil.com"),
        ("https://evil.com:8443/x", "evil.com"),
        ("http://user:secret@evil.com/", "evil.com"),
        ("http://good.com/profile@evil.com", "good.com"),  # an @ in the path names no host
        ("http://a@b@evil.com", "evil.com"),
        ("https://evil.com./", "evil.com"),
        ("http://[2001:db8::1]:8080/x", "[2001:db8::1]"),
        ("http://me@[::1]/", "[::1]"),
        ("ftp://files.evil.com/a//b", "files.evil.com"),
        ("evil.com?a=1?b=2", "evil.com"),
        ("evil.com#a#b", "evil.com"),
        ("https://INBOX./", "inbox"),
    ],
)
def test_a_links_host_is_found_whatever_surrounds_it(url: str, host: str) -> None:
    assert host_of(url) == host
