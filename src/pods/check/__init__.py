"""What this machine is and what pods can do on it: the commands to run first.

    pods env            versions, devices and sandbox modes, for a bug report (pods.check.env)
    pods check          a few training steps in every mode this machine can run, with phase
                        times, peak memory and the PODS : GRPO step-time ratio
                        (pods.check.modes plans them, pods.check.run runs them)
    pods plan           the base model's signal and a step's costs measured here, and for
                        candidate P, n, m the groups with signal per second
                        (pods.check.plan_measure measures, pods.check.plan predicts,
                        pods.check.planner prints)

Nothing here is imported by ``import pods``; each command imports what it probes.
"""
