"""Model conversations: sessions, their messages, and cross-AI reviews between them."""
