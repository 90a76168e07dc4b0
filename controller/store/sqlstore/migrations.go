package sqlstore

// migration is one schema change, in each dialect's words. Both lists are
// one: migration N is the same change on SQLite and on PostgreSQL, and its
// number (index+1) is what schema_migrations records, as the separate
// SQLite and PostgreSQL stores of earlier releases numbered them.
type migration struct {
	sqlite, postgres string
}

// schemaMigrations records the applied migrations.
var schemaMigrations = migration{
	sqlite: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`,
	postgres: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, applied_at timestamptz NOT NULL)`,
}

// operationMigration is the migration that adds nodes.operation; the
// migrator moves each node's working state there (moveOperations).
const operationMigration = 4

// migrations are applied in order; each runs once, inside a transaction
// (on PostgreSQL one holding the migration lock). Never edit a released
// entry: append a new one.
//
// The tables and columns are the same on both databases, so that data can
// be copied between them table by table. Differences are PostgreSQL's own:
//   - documents (data) are bytea holding the exact bytes the Go codec wrote:
//     jsonb would re-encode them (key order, number spelling) and refuses
//     \u0000 in strings, which a BMC password or a vendor field may hold;
//     nothing queries inside the documents, so jsonb would buy nothing;
//   - text columns are COLLATE "C": byte order, like SQLite's BINARY, so a
//     sorted list is the same on both databases whatever locale the
//     cluster was created with;
//   - timestamps are timestamptz (SQLite: fixed-width text); NULL sorts
//     first through COALESCE with '-infinity', as the empty string does in
//     SQLite; lease expiries are by the server's clock (SQLite: Unix
//     nanoseconds by the controller's);
//   - unique constraints and indexes are named, because the dialect
//     recognises duplicates by constraint name;
//   - updated_at is deliberately not indexed and nodes keep 30% of each page
//     free (fillfactor): every node update (a heartbeat, a step) changes
//     updated_at, and an update that changes no indexed column and finds
//     room on its page is a HOT update, which writes no index entry. A node
//     row is 1-2 kB (a large document is compressed inline), so a few
//     percent free is not room for one more version: on 20,000 bulk-loaded
//     1.5 kB rows, the first updates were 0% HOT at fillfactor 85, 100% at 70.
var migrations = []migration{
	{
		// 1: nodes, generic resources (ports, portgroups, allocations,
		// inventories), history.
		sqlite: `CREATE TABLE nodes (
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
		postgres: `CREATE TABLE nodes (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		uuid text COLLATE "C" NOT NULL CONSTRAINT nodes_uuid_key UNIQUE,
		name text COLLATE "C" CONSTRAINT nodes_name_key UNIQUE,
		revision bigint NOT NULL,
		driver text COLLATE "C" NOT NULL,
		provision_state text COLLATE "C" NOT NULL,
		power_state text COLLATE "C",
		maintenance boolean NOT NULL,
		retired boolean NOT NULL,
		instance_uuid text COLLATE "C",
		resource_class text COLLATE "C",
		fault text COLLATE "C",
		owner text COLLATE "C",
		lessee text COLLATE "C",
		conductor_group text COLLATE "C" NOT NULL DEFAULT '',
		chassis_uuid text COLLATE "C",
		description text COLLATE "C",
		shard text COLLATE "C",
		reservation text COLLATE "C",
		created_at timestamptz NOT NULL,
		updated_at timestamptz,
		provision_updated_at timestamptz,
		data bytea NOT NULL
	) WITH (fillfactor = 70);
	CREATE INDEX nodes_provision_state ON nodes (provision_state, id);
	CREATE INDEX nodes_maintenance ON nodes (maintenance, id);
	CREATE INDEX nodes_retired ON nodes (retired, id);
	CREATE INDEX nodes_driver ON nodes (driver, id);
	CREATE INDEX nodes_instance_uuid ON nodes (instance_uuid);
	CREATE INDEX nodes_resource_class ON nodes (resource_class, id);
	CREATE INDEX nodes_conductor_group ON nodes (conductor_group, id);
	CREATE INDEX nodes_reservation ON nodes (reservation) WHERE reservation IS NOT NULL;
	-- keyset pages sorted by name walk this index (sortExpr "name")
	CREATE INDEX nodes_name_sort ON nodes ((COALESCE(name, '')), id);
	CREATE INDEX nodes_created_at ON nodes (created_at, id);
	CREATE TABLE resources (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		kind text COLLATE "C" NOT NULL,
		uuid text COLLATE "C" NOT NULL CONSTRAINT resources_uuid_key UNIQUE,
		node_uuid text COLLATE "C",
		name text COLLATE "C",
		address text COLLATE "C",
		revision bigint NOT NULL,
		data bytea NOT NULL
	);
	CREATE UNIQUE INDEX resources_address ON resources (kind, address) WHERE address IS NOT NULL;
	CREATE UNIQUE INDEX resources_name ON resources (kind, name) WHERE name IS NOT NULL;
	CREATE INDEX resources_node ON resources (kind, node_uuid);
	CREATE TABLE events (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		uuid text COLLATE "C" NOT NULL CONSTRAINT events_uuid_key UNIQUE,
		node_uuid text COLLATE "C" NOT NULL,
		created_at timestamptz NOT NULL,
		data bytea NOT NULL
	);
	CREATE INDEX events_node ON events (node_uuid, id);`,
	},
	{
		// 2: node leases; expiry by the database's clock, so controllers'
		// clocks never need to agree.
		sqlite: `CREATE TABLE node_leases (
		node_uuid TEXT PRIMARY KEY,
		holder TEXT NOT NULL,
		expires_at INTEGER NOT NULL
	);
	CREATE INDEX node_leases_holder ON node_leases(holder);`,
		postgres: `CREATE TABLE node_leases (
		node_uuid text COLLATE "C" PRIMARY KEY,
		holder text COLLATE "C" NOT NULL,
		expires_at timestamptz NOT NULL
	);
	CREATE INDEX node_leases_holder ON node_leases (holder);`,
	},
	{
		// 3: live controllers, by the database's clock like leases.
		sqlite: `CREATE TABLE controllers (
		holder TEXT PRIMARY KEY,
		expires_at INTEGER NOT NULL
	);`,
		postgres: `CREATE TABLE controllers (
		holder text COLLATE "C" PRIMARY KEY,
		expires_at timestamptz NOT NULL
	);`,
	},
	{
		// 4: the conductor's working state (store.Operation) in its own
		// column; moveOperations moves it there from driver_internal_info.
		sqlite:   `ALTER TABLE nodes ADD COLUMN operation BLOB;`,
		postgres: `ALTER TABLE nodes ADD COLUMN operation bytea;`,
	},
	{
		// 5: addresses the boot service's full-mode DHCP gave out; an address
		// belongs to one MAC at a time (the unique constraint decides races
		// between controllers).
		sqlite: `CREATE TABLE dhcp_leases (
		mac TEXT PRIMARY KEY,
		ip TEXT NOT NULL UNIQUE,
		expires_at INTEGER NOT NULL
	);`,
		postgres: `CREATE TABLE dhcp_leases (
		mac text COLLATE "C" PRIMARY KEY,
		ip text COLLATE "C" NOT NULL CONSTRAINT dhcp_leases_ip_key UNIQUE,
		expires_at timestamptz NOT NULL
	);`,
	},
	{
		// 6: finished step runs (store.StepResult) and signed erase records;
		// both JSON documents, paged by id (newest first). Erase records
		// outlive their node. (Branch results, #21, wrote this migration
		// for the separate stores; it is carried here with its number so
		// that its databases open.)
		sqlite: `CREATE TABLE step_results (
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
		postgres: `CREATE TABLE step_results (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		uuid text COLLATE "C" NOT NULL CONSTRAINT step_results_uuid_key UNIQUE,
		node_uuid text COLLATE "C" NOT NULL,
		finished_at timestamptz NOT NULL,
		data bytea NOT NULL
	);
	CREATE INDEX step_results_node ON step_results (node_uuid, id);
	CREATE TABLE erase_records (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		uuid text COLLATE "C" NOT NULL CONSTRAINT erase_records_uuid_key UNIQUE,
		node_uuid text COLLATE "C" NOT NULL,
		created_at timestamptz NOT NULL,
		data bytea NOT NULL
	);
	CREATE INDEX erase_records_node ON erase_records (node_uuid, id);`,
	},
	{
		// 7: no orphan ports, port groups, allocations or inventories: a
		// resource's node must exist, and deleting the node deletes its
		// resources (Ironic deletes a node's allocations with it too).
		// Orphans an earlier release could leave (an allocation of a
		// deleted node; a port created while its node was being deleted)
		// go first. SQLite cannot add a constraint to a table, so the table
		// is rebuilt with it.
		sqlite: `CREATE TABLE resources_new (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		kind TEXT NOT NULL,
		uuid TEXT NOT NULL UNIQUE,
		node_uuid TEXT REFERENCES nodes (uuid) ON DELETE CASCADE,
		name TEXT,
		address TEXT,
		revision INTEGER NOT NULL,
		data BLOB NOT NULL
	);
	INSERT INTO resources_new (id, kind, uuid, node_uuid, name, address, revision, data)
		SELECT id, kind, uuid, node_uuid, name, address, revision, data FROM resources
		WHERE node_uuid IS NULL OR node_uuid IN (SELECT uuid FROM nodes);
	DROP TABLE resources;
	ALTER TABLE resources_new RENAME TO resources;
	CREATE UNIQUE INDEX resources_address ON resources(kind, address) WHERE address IS NOT NULL;
	CREATE UNIQUE INDEX resources_name ON resources(kind, name) WHERE name IS NOT NULL;
	CREATE INDEX resources_node ON resources(kind, node_uuid);
	CREATE INDEX resources_node_uuid ON resources(node_uuid);`,
		postgres: `DELETE FROM resources r WHERE r.node_uuid IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.uuid = r.node_uuid);
	CREATE INDEX resources_node_uuid ON resources (node_uuid);
	ALTER TABLE resources ADD CONSTRAINT resources_node_uuid_fkey
		FOREIGN KEY (node_uuid) REFERENCES nodes (uuid) ON DELETE CASCADE;`,
	},
	{
		// 8: the agent's step cache and command status (store.AgentSession
		// Steps and CommandStatus), the largest and most rewritten parts of
		// a node's operation, in a table of their own: GetNode reads them,
		// node lists do not. moveAgentState moves them out of the
		// operation column.
		sqlite: `CREATE TABLE agent_state (
		node_uuid TEXT PRIMARY KEY REFERENCES nodes (uuid) ON DELETE CASCADE,
		data BLOB NOT NULL
	);`,
		postgres: `CREATE TABLE agent_state (
		node_uuid text COLLATE "C" PRIMARY KEY REFERENCES nodes (uuid) ON DELETE CASCADE,
		data bytea NOT NULL
	);`,
	},
	{
		// 9: a lease's previous holder, set by the upsert that takes it
		// over, so AcquireLease is one statement on both dialects
		// (RETURNING shows the new row; SQLite has no other way to
		// return the row as it was).
		sqlite:   `ALTER TABLE node_leases ADD COLUMN prev_holder TEXT;`,
		postgres: `ALTER TABLE node_leases ADD COLUMN prev_holder text COLLATE "C";`,
	},
	{
		// 10: chassis. A node's chassis_uuid must name one: PostgreSQL by a
		// foreign key, SQLite (which cannot add one to a table) by
		// triggers that fail as a foreign key does. Earlier releases took
		// any chassis_uuid; each one nodes name gets a chassis of that
		// UUID, so no node loses its value. Deleting a chassis with nodes
		// is refused (ChassisNotEmpty).
		sqlite: `CREATE TABLE chassis (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid TEXT NOT NULL UNIQUE,
		revision INTEGER NOT NULL,
		created_at TEXT NOT NULL,
		data BLOB NOT NULL
	);
	INSERT INTO chassis (uuid, revision, created_at, data)
		SELECT c, 1, strftime('%Y-%m-%dT%H:%M:%S.000000Z', 'now'),
			json_object('uuid', c, 'description', NULL, 'extra', json_object(), 'created_at', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
		FROM (SELECT DISTINCT chassis_uuid AS c FROM nodes WHERE chassis_uuid IS NOT NULL ORDER BY chassis_uuid);
	CREATE INDEX nodes_chassis_uuid ON nodes(chassis_uuid) WHERE chassis_uuid IS NOT NULL;
	CREATE TRIGGER nodes_chassis_insert BEFORE INSERT ON nodes
		WHEN NEW.chassis_uuid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM chassis WHERE uuid = NEW.chassis_uuid)
		BEGIN SELECT RAISE(ABORT, 'FOREIGN KEY constraint failed'); END;
	CREATE TRIGGER nodes_chassis_update BEFORE UPDATE OF chassis_uuid ON nodes
		WHEN NEW.chassis_uuid IS NOT NULL AND NEW.chassis_uuid IS NOT OLD.chassis_uuid
			AND NOT EXISTS (SELECT 1 FROM chassis WHERE uuid = NEW.chassis_uuid)
		BEGIN SELECT RAISE(ABORT, 'FOREIGN KEY constraint failed'); END;
	CREATE TRIGGER chassis_delete BEFORE DELETE ON chassis
		WHEN EXISTS (SELECT 1 FROM nodes WHERE chassis_uuid = OLD.uuid)
		BEGIN SELECT RAISE(ABORT, 'FOREIGN KEY constraint failed'); END;`,
		postgres: `CREATE TABLE chassis (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		uuid text COLLATE "C" NOT NULL CONSTRAINT chassis_uuid_key UNIQUE,
		revision bigint NOT NULL,
		created_at timestamptz NOT NULL,
		data bytea NOT NULL
	);
	INSERT INTO chassis (uuid, revision, created_at, data)
		SELECT c, 1, now(), convert_to(json_build_object('uuid', c, 'description', NULL, 'extra', json_build_object(),
			'created_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))::text, 'UTF8')
		FROM (SELECT DISTINCT chassis_uuid AS c FROM nodes WHERE chassis_uuid IS NOT NULL ORDER BY chassis_uuid) o;
	CREATE INDEX nodes_chassis_uuid ON nodes (chassis_uuid) WHERE chassis_uuid IS NOT NULL;
	ALTER TABLE nodes ADD CONSTRAINT nodes_chassis_uuid_fkey
		FOREIGN KEY (chassis_uuid) REFERENCES chassis (uuid);`,
	},
	{
		// 11: deploy templates (Ironic's deploy_templates): unique names
		// and UUIDs, the steps in the document; sorted by any column. And
		// what a registered controller runs (GET /v1/conductors): first
		// and last registration by the lease clock, and a document with
		// its host name, conductor group and hardware types.
		sqlite: `ALTER TABLE controllers ADD COLUMN created_at INTEGER;
	ALTER TABLE controllers ADD COLUMN updated_at INTEGER;
	ALTER TABLE controllers ADD COLUMN data BLOB;
	CREATE TABLE deploy_templates (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid TEXT NOT NULL UNIQUE,
		name TEXT NOT NULL UNIQUE,
		created_at TEXT NOT NULL,
		updated_at TEXT,
		data BLOB NOT NULL
	);`,
		postgres: `ALTER TABLE controllers ADD COLUMN created_at timestamptz, ADD COLUMN updated_at timestamptz, ADD COLUMN data bytea;
	CREATE TABLE deploy_templates (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		uuid text COLLATE "C" NOT NULL CONSTRAINT deploy_templates_uuid_key UNIQUE,
		name text COLLATE "C" NOT NULL CONSTRAINT deploy_templates_name_key UNIQUE,
		created_at timestamptz NOT NULL,
		updated_at timestamptz,
		data bytea NOT NULL
	);`,
	},
	{
		// 12: no schema change: moveDiskRecords moves the disk guard's
		// records (disk_check, disks_at_deploy) from each node's
		// driver_internal_info into its operation column
		// (store.DiskRecords).
	},
	{
		// 13: each node's BIOS settings and firmware components as its BMC
		// last reported them (store.BIOSSettings), one row per name, gone
		// with the node.
		sqlite: `CREATE TABLE bios_settings (
		node_uuid TEXT NOT NULL REFERENCES nodes (uuid) ON DELETE CASCADE,
		name TEXT NOT NULL,
		data BLOB NOT NULL,
		PRIMARY KEY (node_uuid, name)
	);
	CREATE TABLE firmware_components (
		node_uuid TEXT NOT NULL REFERENCES nodes (uuid) ON DELETE CASCADE,
		component TEXT NOT NULL,
		data BLOB NOT NULL,
		PRIMARY KEY (node_uuid, component)
	);`,
		postgres: `CREATE TABLE bios_settings (
		node_uuid text COLLATE "C" NOT NULL REFERENCES nodes (uuid) ON DELETE CASCADE,
		name text COLLATE "C" NOT NULL,
		data bytea NOT NULL,
		PRIMARY KEY (node_uuid, name)
	);
	CREATE TABLE firmware_components (
		node_uuid text COLLATE "C" NOT NULL REFERENCES nodes (uuid) ON DELETE CASCADE,
		component text COLLATE "C" NOT NULL,
		data bytea NOT NULL,
		PRIMARY KEY (node_uuid, component)
	);`,
	},
	{
		// 14: a node's parent node (API 1.83), a column because lists
		// filter on it: Ironic's leave child nodes out unless asked, and
		// /children lists a parent's. No foreign key, as in Ironic: a
		// parent may be deleted, and its children keep the UUID. Existing
		// nodes have no parent (NULL), as their documents say.
		sqlite: `ALTER TABLE nodes ADD COLUMN parent_node TEXT;
	CREATE INDEX nodes_parent_node ON nodes(parent_node) WHERE parent_node IS NOT NULL;`,
		postgres: `ALTER TABLE nodes ADD COLUMN parent_node text COLLATE "C";
	CREATE INDEX nodes_parent_node ON nodes (parent_node) WHERE parent_node IS NOT NULL;`,
	},
	{
		// 15: inspection rules (Ironic's inspection_rules, API 1.96):
		// unique UUIDs, the conditions and actions in the document; lists
		// filter by phase and run in priority order.
		sqlite: `CREATE TABLE inspection_rules (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid TEXT NOT NULL UNIQUE,
		phase TEXT NOT NULL,
		priority INTEGER NOT NULL,
		created_at TEXT NOT NULL,
		updated_at TEXT,
		data BLOB NOT NULL
	);
	CREATE INDEX inspection_rules_phase ON inspection_rules (phase, priority);`,
		postgres: `CREATE TABLE inspection_rules (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		uuid text COLLATE "C" NOT NULL CONSTRAINT inspection_rules_uuid_key UNIQUE,
		phase text COLLATE "C" NOT NULL,
		priority integer NOT NULL,
		created_at timestamptz NOT NULL,
		updated_at timestamptz,
		data bytea NOT NULL
	);
	CREATE INDEX inspection_rules_phase ON inspection_rules (phase, priority);`,
	},
	{
		// 16: runbooks (Ironic's runbooks, API 1.92): unique names and
		// UUIDs, the steps in the document; the columns are what a list
		// sorts by or filters on (owner or public).
		sqlite: `CREATE TABLE runbooks (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		uuid TEXT NOT NULL UNIQUE,
		name TEXT NOT NULL UNIQUE,
		owner TEXT,
		public INTEGER NOT NULL,
		disable_ramdisk INTEGER NOT NULL,
		created_at TEXT NOT NULL,
		updated_at TEXT,
		data BLOB NOT NULL
	);`,
		postgres: `CREATE TABLE runbooks (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		uuid text COLLATE "C" NOT NULL CONSTRAINT runbooks_uuid_key UNIQUE,
		name text COLLATE "C" NOT NULL CONSTRAINT runbooks_name_key UNIQUE,
		owner text COLLATE "C",
		public boolean NOT NULL,
		disable_ramdisk boolean NOT NULL,
		created_at timestamptz NOT NULL,
		updated_at timestamptz,
		data bytea NOT NULL
	);`,
	},
	{
		// 17: each node's boot timeline (store.BootTimelines), one row per
		// stage, its JSON document in data; gone with the node.
		sqlite: `CREATE TABLE boot_stages (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		node_uuid TEXT NOT NULL REFERENCES nodes (uuid) ON DELETE CASCADE,
		boot INTEGER NOT NULL,
		at TEXT NOT NULL,
		data BLOB NOT NULL
	);
	CREATE INDEX boot_stages_node_boot ON boot_stages (node_uuid, boot, id);`,
		postgres: `CREATE TABLE boot_stages (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		node_uuid text COLLATE "C" NOT NULL REFERENCES nodes (uuid) ON DELETE CASCADE,
		boot bigint NOT NULL,
		at timestamptz NOT NULL,
		data bytea NOT NULL
	);
	CREATE INDEX boot_stages_node_boot ON boot_stages (node_uuid, boot, id);`,
	},
}
