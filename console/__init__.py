"""The review console (issue 32): a web page for human moderators over the review, verdict and
decision topics, started by `moderator console`. Part of the dev tools' distribution; the runtime
never imports it."""
