"""kale/cli."""
