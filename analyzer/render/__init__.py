"""Renderers: format reports, never compute or print them."""
