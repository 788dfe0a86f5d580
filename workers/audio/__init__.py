"""Audio transcription (``transcribe_segments``): decode, find speech, transcribe, in bounded memory."""
