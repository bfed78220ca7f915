"""Model import: trace a torch.nn.Module on the meta device into a ModelSpec; the zoo builder."""
