"""Node agents (issue 41): one per node of a user's cluster; a gang of them runs a trial with torchrun."""
