"""compile_query: the exact strings both stores receive (reference 2.1, 2.2 and section 11)."""

# Test data is deliberately non-ASCII (Cyrillic, full-width forms, typographic quotes).
# ruff: noqa: RUF001

from __future__ import annotations

import pytest

from service.projects.lexical import (
    FTS5_MATCH_NOTHING,
    TSQUERY_MATCH_NOTHING,
    LexicalQuery,
    compile_query,
)

NPL_QUERY = "MEASUREMENT OF DIELECTRIC CONSTANT OF LIQUIDS BY THE USE OF MICROWAVE TECHNIQUES"


def test_multi_word_text_is_and_of_prefix_terms() -> None:
    query = compile_query("project planning")

    # Two words relax too (issue 16): documents with both rank first, then those with one.
    assert query == LexicalQuery(
        fts5='content : ("project"* AND "planning"*)',
        fts5_relaxed='content : ("project"* OR "planning"*)',
        tsquery="('project':* & 'planning':*)",
        tsquery_relaxed="'project':* | 'planning':*",
        script_tsquery=None,
        terms=("project", "planning"),
        explicit=False,
        score_words=(("project", True), ("planning", True)),
        relaxed_words=("project", "planning"),
    )


def test_simple_term_gets_prefix() -> None:
    query = compile_query("coffee")

    assert query.fts5 == 'content : ("coffee"*)'
    assert query.tsquery == "'coffee':*"


@pytest.mark.parametrize("text", ["hello*", "hello"])
def test_existing_wildcard_is_kept_as_prefix(text: str) -> None:
    assert compile_query(text).fts5 == 'content : ("hello"*)'


def test_question_punctuation_does_not_make_a_phrase() -> None:
    query = compile_query("When did Melanie paint a sunrise?")

    assert query.fts5 == 'content : ("Melanie"* AND "paint"* AND "sunrise"*)'
    assert query.tsquery == "('Melanie':* & 'paint':* & 'sunrise':*)"
    assert query.fts5_relaxed == 'content : ("melanie"* OR "paint"* OR "sunrise"*)'
    assert query.tsquery_relaxed == "'melanie':* | 'paint':* | 'sunrise':*"
    assert query.terms == ("melanie", "paint", "sunrise")


@pytest.mark.parametrize(
    ("text", "fts5"),
    [
        ("C++", 'content : ("C++")'),  # one-letter last token: exact, not every c-word
        ("function()", 'content : ("function()"*)'),
        ("email@domain.com", 'content : ("email@domain.com"*)'),
        ("array[index]", 'content : ("array[index]"*)'),
        ("config.json", 'content : ("config.json"*)'),
        ("+++invalid+++", 'content : ("+++invalid+++"*)'),
        ("!!!error!!!", 'content : ("error"*)'),  # sentence punctuation at the edges
        ("foo<bar", 'content : ("foo<bar"*)'),
        ("O'Reilly", 'content : ("O\'Reilly"*)'),
        ("it's working", 'content : ("it\'s"* AND "working"*)'),
    ],
)
def test_programming_terms_and_punctuation_are_quoted(text: str, fts5: str) -> None:
    assert compile_query(text).fts5 == fts5


def test_apostrophes_are_doubled_in_tsquery() -> None:
    assert compile_query("O'Reilly").tsquery == "'O''Reilly':*"
    assert compile_query("don't").tsquery == "'don''t':*"


def test_version_strings_and_special_words_are_per_word_prefix_phrases() -> None:
    # Departure from the reference, which quoted the whole text as one phrase: each word
    # stays an independent AND operand, so word order does not matter.
    assert compile_query("Basic Memory v0.13.0b2").fts5 == (
        'content : ("Basic"* AND "Memory"* AND "v0.13.0b2"*)'
    )
    assert compile_query("config.json file").fts5 == 'content : ("config.json"* AND "file"*)'


@pytest.mark.parametrize("path", ["docs/readme.md", "docs/specs/a.md"])
def test_file_paths_are_exact_phrases(path: str) -> None:
    query = compile_query(path)

    assert query.fts5 == f'content : ("{path}")'
    assert query.tsquery == f"'{path}'"


@pytest.mark.parametrize("text", ["", "   ", "\t\n", "*", "?!", "@#$%^&*()", '""', "\x00"])
def test_nothing_searchable_means_no_lexical_channel(text: str) -> None:
    query = compile_query(text)

    assert (query.fts5, query.tsquery, query.script_tsquery) == (None, None, None)
    assert query.terms == ()


def test_boolean_operators_are_preserved() -> None:
    assert compile_query("coffee AND brewing").fts5 == 'content : ("coffee" AND "brewing")'
    assert compile_query("coffee AND brewing").tsquery == "('coffee' & 'brewing')"
    assert compile_query("cat OR dog").tsquery == "('cat' | 'dog')"
    assert compile_query("(pour OR french) AND press").tsquery == (
        "(('pour' | 'french') & 'press')"
    )


def test_not_becomes_and_not() -> None:
    query = compile_query("coffee NOT decaf")

    assert query.fts5 == '(content : ("coffee")) NOT content : ("decaf")'
    assert query.tsquery == "('coffee' & !'decaf')"
    assert query.terms == ("coffee",)
    assert query.explicit


def test_hyphenated_boolean_operands_are_quoted() -> None:
    assert compile_query("C++ OR python-script").fts5 == ('content : ("C++" OR "python-script")')


def test_quoted_phrases_keep_their_words_together() -> None:
    query = compile_query('"incident response" OR "database recovery"')

    assert query.fts5 == 'content : ("incident response" OR "database recovery")'
    # to_tsquery turns a multi-word literal into a <-> phrase, like FTS5.
    assert query.tsquery == "('incident response' | 'database recovery')"
    assert query.explicit
    assert query.fts5_relaxed is None


def test_quotes_inside_words_are_escaped() -> None:
    assert compile_query('say "hello"').fts5 == 'content : ("say"* AND "hello")'
    assert compile_query('"say ""hello"" now"').fts5 == ('content : ("say" AND "hello" AND "now")')


def test_prefix_phrase_and_explicit_prefix_word() -> None:
    query = compile_query('cats AND (dogs OR "big bird"*) NOT fish*')

    assert query.fts5 == (
        '(content : ("cats" AND ("dogs" OR "big bird"*))) NOT content : ("fish"*)'
    )
    assert query.tsquery == "('cats' & ('dogs' | 'big bird':*) & !'fish':*)"


@pytest.mark.parametrize(
    ("text", "fts5"),
    [
        ("hello AND  AND world", 'content : ("hello"* AND "world"*)'),
        ("  OR test", 'content : ("test"*)'),
        ("test OR  ", 'content : ("test"*)'),
        ("(alpha OR beta", 'content : ("alpha"* AND "beta"*)'),
        ("alpha OR beta)", 'content : ("alpha"* AND "beta"*)'),
        ("alpha AND () beta", 'content : ("alpha"* AND "beta"*)'),
        (
            '"incident response OR database',
            'content : ("incident"* AND "response"* AND "database"*)',
        ),
        ('"foo" AND function()', 'content : ("foo"* AND "function"*)'),
    ],
)
def test_malformed_explicit_syntax_falls_back_to_and_of_words(text: str, fts5: str) -> None:
    query = compile_query(text)

    assert query.fts5 == fts5
    assert query.fts5_relaxed is None  # still explicit: never broadened


def test_parenthetical_terms_group_and_escape() -> None:
    assert compile_query('(say "hello" world) OR x').fts5 == (
        'content : (("say" AND "hello" AND "world") OR "x")'
    )
    assert "it's" in (compile_query("(it's working)").fts5 or "")


def test_adjacent_quotes_and_groups_get_an_implicit_and() -> None:
    # Quotes in a sentence are phrases of natural-language text: the words stay prefixes.
    assert compile_query('incident"response runbook"').fts5 == (
        'content : ("incident"* AND "response runbook")'
    )
    assert compile_query('"incident"(response)').tsquery == "('incident' & 'response':*)"


def test_operator_characters_inside_operands_stay_text() -> None:
    assert compile_query('"incident" AND auth|admin').tsquery == "('incident' & 'auth|admin')"
    assert compile_query('"incident" AND bar:baz').fts5 == ('content : ("incident" AND "bar:baz")')


@pytest.mark.parametrize("text", ["NOT draft", "(NOT a) OR (NOT b)", '"?" NOT draft'])
def test_pure_negation_matches_nothing(text: str) -> None:
    query = compile_query(text)

    assert query.fts5 == FTS5_MATCH_NOTHING
    assert query.tsquery == TSQUERY_MATCH_NOTHING
    assert query.explicit


def test_negated_or_branch_is_dropped() -> None:
    assert compile_query("alpha OR NOT beta").fts5 == 'content : ("alpha")'


def test_double_negation_cancels() -> None:
    assert compile_query("alpha NOT NOT beta").fts5 == 'content : ("alpha" AND "beta")'


class TestOperatorRule:
    """Upper-case AND/OR/NOT are operators only between words in mixed-case text."""

    def test_all_capitals_query_is_natural_language(self) -> None:
        query = compile_query(NPL_QUERY)

        assert not query.explicit
        assert query.fts5 == (
            'content : ("MEASUREMENT"* AND "DIELECTRIC"* AND "CONSTANT"* AND "LIQUIDS"* '
            'AND "USE"* AND "MICROWAVE"* AND "TECHNIQUES"*)'
        )
        assert query.fts5_relaxed == (
            'content : ("measurement"* OR "dielectric"* OR "constant"* OR "liquids"* '
            'OR "use"* OR "microwave"* OR "techniques"*)'
        )
        assert query.terms == (
            "measurement",
            "dielectric",
            "constant",
            "liquids",
            "use",
            "microwave",
            "techniques",
        )

    def test_all_capitals_and_is_a_stopword_not_an_operator(self) -> None:
        query = compile_query("ANALYSIS AND DESIGN OF FILTERS")

        assert not query.explicit
        assert query.fts5 == 'content : ("ANALYSIS"* AND "DESIGN"* AND "FILTERS"*)'
        assert query.fts5_relaxed is not None

    def test_mixed_case_text_uses_operators(self) -> None:
        assert compile_query("CATS AND dogs").explicit
        assert compile_query("cats OR dogs").tsquery == "('cats' | 'dogs')"

    def test_lower_case_words_are_never_operators(self) -> None:
        query = compile_query("cats and dogs")

        assert not query.explicit
        assert query.fts5 == 'content : ("cats"* AND "dogs"*)'

    @pytest.mark.parametrize("text", ["dogs AND", "OR dogs", "dogs NOT"])
    def test_operator_words_at_the_edges_are_words(self, text: str) -> None:
        query = compile_query(text)

        assert not query.explicit
        assert query.fts5 == 'content : ("dogs"*)'


class TestRelaxationEligibility:
    def test_multi_word_natural_query_offers_or_of_terms(self) -> None:
        query = compile_query("how to revoke granted access")

        assert query.fts5 == 'content : ("revoke"* AND "granted"* AND "access"*)'
        assert query.fts5_relaxed == 'content : ("revoke"* OR "granted"* OR "access"*)'
        assert query.tsquery_relaxed == "'revoke':* | 'granted':* | 'access':*"

    @pytest.mark.parametrize(
        "text",
        [
            '"exact phrase about access tokens"',
            "alpha OR beta gamma delta",
            "alpha NOT beta gamma",
            "alpha* beta",
        ],
    )
    def test_explicit_queries_never_relax(self, text: str) -> None:
        query = compile_query(text)

        assert query.fts5_relaxed is None
        assert query.tsquery_relaxed is None

    @pytest.mark.parametrize(
        ("text", "strict", "relaxed"),
        [
            ("SPEC 16 design", '"SPEC"* AND "16"* AND "design"*', '"spec"* OR "16"* OR "design"*'),
            ("two words", '"two"* AND "words"*', '"two"* OR "words"*'),
            (
                'editors for "what you see is what you get"',
                '"editors"* AND "what you see is what you get"',
                '"editors"* OR "see"* OR "get"*',
            ),
            ("report el/1", '"report"* AND "el/1"', '"report"* OR "el"* OR "1"*'),
        ],
    )
    def test_numeric_short_and_quoted_sentences_relax(
        self, text: str, strict: str, relaxed: str
    ) -> None:
        query = compile_query(text)

        assert not query.explicit
        assert query.fts5 == f"content : ({strict})"
        assert query.fts5_relaxed == f"content : ({relaxed})"

    def test_relaxed_form_equal_to_strict_is_omitted(self) -> None:
        assert compile_query("what is love").fts5_relaxed is None


def test_stopwords_are_dropped_unless_all_are_stopwords() -> None:
    assert compile_query("the art of war").fts5 == 'content : ("art"* AND "war"*)'
    assert compile_query("to be or not").fts5 == (
        'content : ("to"* AND "be"* AND "or"* AND "not"*)'
    )


def test_terms_are_lower_case_words_of_positive_operands() -> None:
    query = compile_query('"Incident Response" OR config.json NOT draft')

    assert query.terms == ("incident", "response", "config", "json")


def test_control_characters_and_deep_nesting_never_raise() -> None:
    assert compile_query("foo\x00bar").fts5 == 'content : ("foo"* AND "bar"*)'
    nested = "(" * 500 + "alpha OR beta" + ")" * 500
    assert compile_query(nested).fts5 == 'content : ("alpha"* AND "beta"*)'
    assert compile_query("NOT " * 1000 + "alpha beta").fts5 == 'content : ("alpha" AND "beta")'


class TestScripts:
    def test_cjk_run_becomes_gram_phrase(self) -> None:
        query = compile_query("适者生存")

        assert query.fts5 == 'ngrams : ("适者 者生 生存")'
        assert query.tsquery is None
        assert query.script_tsquery == "'适者' <-> '者生' <-> '生存'"
        assert query.terms == ("适者生存",)

    def test_mixed_query_requires_words_and_phrases(self) -> None:
        query = compile_query("OpenAI 适者生存，サバイバル")

        assert query.fts5 == (
            'content : ("OpenAI"*) AND ngrams : ("适者 者生 生存") '
            'AND ngrams : ("サバ バイ イバ バル")'
        )
        assert query.tsquery == "'OpenAI':*"
        assert query.script_tsquery == (
            "('适者' <-> '者生' <-> '生存') & ('サバ' <-> 'バイ' <-> 'イバ' <-> 'バル')"
        )

    def test_single_character_query_is_a_unigram(self) -> None:
        assert compile_query("猫").fts5 == 'ngrams : ("猫")'
        assert compile_query("猫").script_tsquery == "'猫'"

    def test_whitespace_separated_cjk_words_relax_to_word_prefixes(self) -> None:
        query = compile_query("季度 报告")

        assert query.fts5 == 'ngrams : ("季度") AND ngrams : ("报告")'
        assert query.script_tsquery == "'季度' & '报告'"
        assert query.fts5_relaxed == 'content : ("季度"* OR "报告"*)'
        assert query.tsquery_relaxed == "'季度':* | '报告':*"

    def test_script_under_or_stays_a_literal_word(self) -> None:
        query = compile_query("适者生存 OR OpenAI")

        assert query.fts5 == 'content : ("适者生存" OR "OpenAI")'
        assert query.script_tsquery is None

    def test_script_beside_negation_subtracts_from_the_phrase(self) -> None:
        query = compile_query("适者生存 NOT foo")

        assert query.fts5 == '(ngrams : ("适者 者生 生存")) NOT content : ("foo")'
        assert query.tsquery == "!'foo'"
        assert query.script_tsquery == "'适者' <-> '者生' <-> '生存'"

    def test_quoted_script_phrase_is_split_into_grams(self) -> None:
        assert compile_query('"适者生存"').fts5 == 'ngrams : ("适者 者生 生存")'

    def test_full_width_ascii_is_not_script_text(self) -> None:
        assert compile_query("ＡＢＣ").fts5 == 'content : ("ＡＢＣ"*)'
