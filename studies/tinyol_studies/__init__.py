"""tinyol's studies: the experiments behind docs/study.md, docs/adaptive.md and docs/fleet.md,
and the example models of models/. They live beside the product (studies/, as Flower keeps
baselines/ beside flwr/), not in it: the wheel ships none of them. They import tinyol as any
user does; tinyol never imports them.

    make study                                           # replay + depth -> docs/study.md
    PYTHONPATH=host:studies python -m tinyol_studies.X   # any one of them

Modules: `replay` (naive SGD vs quantized latent replay), `depth` (how deep to learn), `lean`
(sparse updates), `auto` (`--stage-train auto` on the study's networks), `recipe` (rehearsal,
balanced replay, schedules), `usermodel` and `codec` (issue 30: a user's Sequential model,
compressed replay), `fleet` (non-IID boards, fleet averaging), `deploy_bench` (a fleet over
Flower's deployment engine), `zoo` (the example models: definitions, training, export).
"""
