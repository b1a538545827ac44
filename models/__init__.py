"""Builds, exports and evaluates moderation models (torch lives here only, never in the runtime)."""
