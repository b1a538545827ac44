"""Real-time chat moderation stream processor."""

__version__ = "0.1.0"
