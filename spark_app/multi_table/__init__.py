"""Many tables in one sync: committing several tables' transactions as one consistent cut (docs/protocol.md,
"Many tables in one sync")."""
