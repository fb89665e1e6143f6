"""pods: GRPO with PODS, Policy Optimization with Down-Sampling (arXiv 2504.13818).

Generate n rollouts per prompt, keep the m most informative for the policy update.
"""

from pods.core.advantages import group_advantages
from pods.core.downsample import RULES, downsample
from pods.core.loss import LossStats, PolicyLoss, policy_loss

__all__ = ["RULES", "LossStats", "PolicyLoss", "downsample", "group_advantages", "policy_loss"]
__version__ = "0.1.0"
