"""Cluster scheduling policies behind one interface (`base.Policy`), found through a lazy registry."""
