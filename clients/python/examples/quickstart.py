"""Index three notes, search them three ways, and handle an error.

    python quickstart.py [ADDRESS]        # default 127.0.0.1:50051
"""

from __future__ import annotations

import sys

from search_client import (
    AlreadyExistsError,
    Document,
    FailedPreconditionError,
    NotFoundError,
    Project,
    SearchClient,
    SearchMode,
)

NOTES = [
    Document("note", "nebulae.md", title="Nebulae", path="stars/nebulae.md",
             body="A nebula is a cloud of gas and dust where new stars are born."),
    Document("note", "pulsars.md", title="Pulsars", path="stars/pulsars.md",
             body="A pulsar is a rotating neutron star that sweeps radio beams past Earth."),
    Document("note", "comets.md", title="Comets", path="solar-system/comets.md",
             body="A comet is ice and dust; near the Sun it grows a coma and two tails.",
             metadata={"visible": True}),
]


def project_for(client: SearchClient, external_id: str) -> Project:
    """The project with `external_id`, created on first use."""
    try:
        return client.create_project(external_id, "Quickstart notes")
    except AlreadyExistsError:
        return next(p for p in client.iter_projects() if p.external_id == external_id)


def main(target: str) -> None:
    """Run the tour against `target`."""
    with SearchClient(target, default_timeout=30) as client:
        project = project_for(client, "quickstart")
        summary = client.upsert_documents(project.project_id, NOTES)
        print(f"project {project.external_id} (id {project.project_id}): "
              f"{summary.documents_created} created, {summary.documents_unchanged} unchanged, "
              f"{summary.chunks_embedded} chunks embedded")

        for mode in (SearchMode.FTS, SearchMode.VECTOR, SearchMode.HYBRID):
            print(f"{mode.name} results for 'star':")
            # Pages of two results, followed across calls with next_page_token.
            results = client.iter_project_results(
                [project.project_id], "star", mode=mode, page_size=2, limit=5
            )
            try:
                for result in results:
                    print(f"  {result.scores.score:.3f}  {result.title}  ({result.path})")
            except FailedPreconditionError as error:  # semantic search is off on this server
                print(f"  skipped: {error.reason}: {error.message}")

        try:
            next(client.search_projects([987654321], "star"))
        except NotFoundError as error:
            print(f"expected error: {error.code.name} {error.reason} {dict(error.metadata)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051")
