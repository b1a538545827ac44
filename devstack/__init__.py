"""The development stack: an embedded Kafka broker (Tansu) and Redis as child processes, the
moderator as a child process, and the `moderator dev` / `moderator demo` commands.

Not part of the runtime: the `moderator` package never imports it (the commands reach the CLI
through the `moderator.commands` entry point), and it needs the `dev` extra for the broker.
"""
