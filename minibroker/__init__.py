"""minibroker: a teaching STOMP broker (the map of the code: ``docs/design-notes.md``)."""
