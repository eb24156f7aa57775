"""What runs when: the resumable step graph, the Prefect flows, atomic publication."""
