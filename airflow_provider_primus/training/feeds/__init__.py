"""The feeds a trainer reads, one per source, and the policy that mixes them: history shuffled and
replayed, the freshness guard, the held-out evaluation."""
