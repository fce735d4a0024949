"""The simulated cluster (the default backend): inventory from a file, pods as SimulatedPod rows."""
