"""Spec column types: the grammar of nested types and what it maps to."""
