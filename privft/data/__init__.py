"""Texts for fine-tuning and membership audits: file loaders, built-in corpora and seeded splits."""

from privft.data.corpora import CORPORA, load_corpus
from privft.data.errors import DataError
from privft.data.loaders import load_texts
from privft.data.overlap import NEAR_DUPLICATE_THRESHOLD, NGRAM_WORDS
from privft.data.split import MembershipSplit, NearDuplicate, NearDuplicateWarning

__all__ = [
    "CORPORA",
    "NEAR_DUPLICATE_THRESHOLD",
    "NGRAM_WORDS",
    "DataError",
    "MembershipSplit",
    "NearDuplicate",
    "NearDuplicateWarning",
    "load_corpus",
    "load_texts",
]
