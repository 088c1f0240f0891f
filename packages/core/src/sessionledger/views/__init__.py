"""Views of a log for other readers: provider message formats (OpenAI, Anthropic) to and
from a history, the listing summary of a session and the text a search index holds.
Built on ``sessionledger.model`` only; the modules here are internal (docs/api.md)."""
