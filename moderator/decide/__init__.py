"""From a message's text to the policy's ruling: the screen shared by the pipeline and
`moderator score`, windows of a long text, the language gate, the model (`classifier`,
`batcher`), the score cache, and the degraded mode under overload.

May import: the base, kafka/, policy/ and decide/ itself.
"""
