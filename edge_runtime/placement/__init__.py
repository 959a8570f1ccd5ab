"""Where and how a model runs on this box.

Device profiles rank the backend choices for a kind of box (`profiles`), selection checks each against
what the box really has and picks a variant of the package for it (`selection`, `variant_pick`), and
loading walks the runnable choices in order until one loads (`loading`, `model`); pipelines that run
the same model on the same settings share one loaded model (`model_pool`).
"""
