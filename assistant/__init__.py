"""The platform-neutral assistant: ``types`` is everything a chat adapter sees (DTOs, outcomes,
``AssistantPort``); ``service`` is the façade that implements it."""
