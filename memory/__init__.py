"""User memory: a user's saved preferences (``store``), the chat commands that edit them
(``chat``) and the agent middleware that puts them in the prompt (``prompt``)."""
