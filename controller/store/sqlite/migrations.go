package sqlite

// migrations are applied in order; each runs once, inside a transaction,
// and its index+1 is recorded in schema_migrations. Never edit a released
// entry: append a new one.
var migrations = []string{
	// 1: nodes, generic resources (ports, portgroups, allocations), history.
	`CREATE TABLE nodes (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid TEXT NOT NULL UNIQUE,
		name TEXT UNIQUE,
		revision INTEGER NOT NULL,
		driver TEXT NOT NULL,
		provision_state TEXT NOT NULL,
		power_state TEXT,
		maintenance INTEGER NOT NULL,
		retired INTEGER NOT NULL,
		instance_uuid TEXT,
		resource_class TEXT,
		fault TEXT,
		owner TEXT,
		lessee TEXT,
		conductor_group TEXT NOT NULL DEFAULT '',
		chassis_uuid TEXT,
		description TEXT,
		shard TEXT,
		reservation TEXT,
		created_at TEXT NOT NULL,
		updated_at TEXT,
		provision_updated_at TEXT,
		data BLOB NOT NULL
	);
	CREATE INDEX nodes_provision_state ON nodes(provision_state, id);
	CREATE INDEX nodes_maintenance ON nodes(maintenance, id);
	CREATE INDEX nodes_retired ON nodes(retired, id);
	CREATE INDEX nodes_driver ON nodes(driver, id);
	CREATE INDEX nodes_instance_uuid ON nodes(instance_uuid);
	CREATE INDEX nodes_resource_class ON nodes(resource_class, id);
	CREATE INDEX nodes_reservation ON nodes(reservation) WHERE reservation IS NOT NULL;
	CREATE TABLE resources (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		kind TEXT NOT NULL,
		uuid TEXT NOT NULL UNIQUE,
		node_uuid TEXT,
		name TEXT,
		address TEXT,
		revision INTEGER NOT NULL,
		data BLOB NOT NULL
	);
	CREATE UNIQUE INDEX resources_address ON resources(kind, address) WHERE address IS NOT NULL;
	CREATE UNIQUE INDEX resources_name ON resources(kind, name) WHERE name IS NOT NULL;
	CREATE INDEX resources_node ON resources(kind, node_uuid);
	CREATE TABLE events (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid TEXT NOT NULL UNIQUE,
		node_uuid TEXT NOT NULL,
		created_at TEXT NOT NULL,
		data BLOB NOT NULL
	);
	CREATE INDEX events_node ON events(node_uuid, id);`,
	// 2: node leases (holder and expiry, in Unix nanoseconds).
	`CREATE TABLE node_leases (
		node_uuid TEXT PRIMARY KEY,
		holder TEXT NOT NULL,
		expires_at INTEGER NOT NULL
	);
	CREATE INDEX node_leases_holder ON node_leases(holder);`,
	// 3: live controllers (expiry in Unix nanoseconds).
	`CREATE TABLE controllers (
		holder TEXT PRIMARY KEY,
		expires_at INTEGER NOT NULL
	);`,
	// 4: the conductor's working state (store.Operation) in its own
	// column; convert moves it there from driver_internal_info.
	`ALTER TABLE nodes ADD COLUMN operation BLOB;`,
	// 5: addresses the boot service's full-mode DHCP gave out (expiry in
	// Unix nanoseconds); an address belongs to one MAC at a time.
	`CREATE TABLE dhcp_leases (
		mac TEXT PRIMARY KEY,
		ip TEXT NOT NULL UNIQUE,
		expires_at INTEGER NOT NULL
	);`,
	// 6: finished step runs (store.StepResult) and signed erase records;
	// both JSON documents, paged by id (newest first). Erase records
	// outlive their node.
	`CREATE TABLE step_results (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid TEXT NOT NULL UNIQUE,
		node_uuid TEXT NOT NULL,
		finished_at TEXT NOT NULL,
		data BLOB NOT NULL
	);
	CREATE INDEX step_results_node ON step_results(node_uuid, id);
	CREATE TABLE erase_records (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid TEXT NOT NULL UNIQUE,
		node_uuid TEXT NOT NULL,
		created_at TEXT NOT NULL,
		data BLOB NOT NULL
	);
	CREATE INDEX erase_records_node ON erase_records(node_uuid, id);`,
}
