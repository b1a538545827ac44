"""Export and quantization: a trained module or a Hugging Face checkpoint into a model directory
that meets the runtime's contract (`onnx_export`, `checkpoint`), its feed-forward
down-projections split around their outlier channels for int8 (`outliers`), and a built model
compared with the shipped one and copied into the runtime package (`ship`). Nothing here judges a
model on real text: that is `models.evaluation`'s."""
