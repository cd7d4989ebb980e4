"""Node-level placement policies: pure score plugins over a cluster snapshot."""
