"""The human loop: a `review` decision held with its channel's context (`hold`, `held`), its
final decision after a verdict (`verdicts`) or a timeout (`finals`), the overrides verdicts
leave (`overrides`, changed by hand through `override_edits`), and the audit trail.

May import: the base, kafka/, policy/, decide/, users/ and review/ itself.
"""
