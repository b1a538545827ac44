"""Evaluation: what a model directory decides on held-out, real and hand-written lines, beside
the teachers (`evaluate`, `realeval`, `realtext`, `suite`); the default policy's thresholds
tuned on the real dev split (`tuning`); and the int8 graph chosen, or a model requantized, by its
gap on that split (`quantization`). It measures and returns figures; `models.reports` writes
them down."""
