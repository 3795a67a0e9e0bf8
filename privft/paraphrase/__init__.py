"""Local paraphrasers behind one interface, and the obfuscated training samples they produce; no network."""

from privft.paraphrase.base import Paraphraser
from privft.paraphrase.cache import ParaphraseCache
from privft.paraphrase.llm import INSTRUCTIONS, SYSTEM_PROMPT, LLMParaphraser, build_messages, clean_reply
from privft.paraphrase.neighbour import NeighbourParaphraser
from privft.paraphrase.obfuscate import MODES, ObfuscationResult, obfuscate, split_prefix
from privft.paraphrase.quality import rejection_reason, word_similarity
from privft.paraphrase.registry import PARAPHRASERS, build_paraphraser, get_paraphraser, register_paraphraser
from privft.paraphrase.wordnet import MissingResourceError, WordNetParaphraser

__all__ = [
    "INSTRUCTIONS", "MODES", "PARAPHRASERS", "SYSTEM_PROMPT", "LLMParaphraser", "MissingResourceError",
    "NeighbourParaphraser", "ObfuscationResult", "ParaphraseCache", "Paraphraser", "WordNetParaphraser",
    "build_messages", "build_paraphraser", "clean_reply", "get_paraphraser", "obfuscate", "register_paraphraser",
    "rejection_reason", "split_prefix", "word_similarity",
]
