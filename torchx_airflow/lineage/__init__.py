"""What a run records and where: stores, DAG edges, XCom and metadata keys, assets, OpenLineage events."""
