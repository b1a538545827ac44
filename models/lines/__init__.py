"""Lines and splits: the template corpus (`templates`, `corpus`), its identity counterparts and
probe (`balance`, `identity`), real text split once into train / dev / test with its training
targets (`realdata`), the teachers that label it (`teachers`), and the moderators' verdicts as a
train split of their own (`verdicts`). Built from `models.sources.archives`; nothing here trains,
exports or scores a model of ours."""
