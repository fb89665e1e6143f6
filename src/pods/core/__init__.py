"""The algorithm's pure math: tensors in, tensors out, no config objects and no I/O.

    downsample        the per-prompt rules (keep m of each prompt's n)
    downsample_checks the checks of downsample's inputs and of a custom rule's output
    batch_downsample  batch-level max-variance selection (P*m across the prompts)
    advantages        group-normalised advantages over the kept rollouts
    rollout_inputs    what a rule may read of each rollout besides its reward (lengths)
    selection         the one selection: rewards [P, n] + a SelectionSpec -> the kept
                      rollouts, their advantages and the select/ metrics (the trainer and
                      the TRL and verl adapters all call it)
    loss              the clipped policy-gradient loss with optional KL
    correction        the engine/trainer log-prob gap: its tail, and the importance-
                      sampling weights that correct for it (truncated or masked)

Vocabulary: P prompts per step, n rollouts generated per prompt, m kept per prompt.
"""
