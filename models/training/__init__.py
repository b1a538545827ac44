"""Training: fine-tuning the encoder on the lines of `models.lines` (`train`), and the F1 that
picks a model during training and reports it afterwards (`metrics`). Torch is imported here
inside functions only, so the lines and the command line load without it."""
