"""minibroker: a teaching STOMP broker (see DESIGN.md for the map)."""
