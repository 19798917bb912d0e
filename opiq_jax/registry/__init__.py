"""The registries of environments and of methods (a method is a composition of parts with its best settings per
family)."""
