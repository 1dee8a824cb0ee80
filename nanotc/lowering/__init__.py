"""Progressive lowering: collective instructions to register tiles, tiles to nanokernels."""
