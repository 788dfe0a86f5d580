"""Video extractors: shots (PySceneDetect) and keyframes, from one PyAV decoding pass."""
