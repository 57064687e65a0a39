//! OpenAPI v3 schemas for the built-in kinds the server serves: a **hand-kept minimal subset**
//! of the Kubernetes API (not generated from upstream). Each kind has `apiVersion`, `kind`,
//! `metadata` and the fields the controllers and their users touch; the rest of a `spec` or
//! `status` is an open object, and every object keeps fields it does not name
//! (`x-kubernetes-preserve-unknown-fields`, so kubectl 1.20's client-side validation does not
//! refuse real manifests). Enough for
//! `kubectl explain` and for kubectl's server-side field validation check; the server does not
//! validate built-in kinds against these (it stores them as written).

use serde_json::{Map, Value, json};

/// The `ObjectMeta` schema's name (every kind's `metadata` refers to it).
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// The `Status` schema's name (answers to DELETE).
pub const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";

fn s(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn int(description: &str) -> Value {
    json!({"type": "integer", "format": "int32", "description": description})
}

fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

fn time(description: &str) -> Value {
    json!({"type": "string", "format": "date-time", "description": description})
}

fn int_or_string(description: &str) -> Value {
    json!({"x-kubernetes-int-or-string": true, "description": description})
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string", "default": ""}, "description": description})
}

fn string_map(description: &str) -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string", "default": ""},
           "description": description})
}

fn open(description: &str) -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
           "description": description})
}

fn list_of(item: Value, description: &str) -> Value {
    json!({"type": "array", "items": item, "description": description})
}

fn object(description: &str, fields: &[(&str, Value)]) -> Value {
    let properties: Map<String, Value> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    // The subset names only some fields of each object: the others are allowed all the same.
    json!({"type": "object", "description": description, "properties": properties,
           "x-kubernetes-preserve-unknown-fields": true})
}

fn condition() -> Value {
    object(
        "A condition of the object.",
        &[
            ("type", s("Type of the condition.")),
            (
                "status",
                s("Status of the condition: True, False or Unknown."),
            ),
            (
                "reason",
                s("A machine-readable reason for the last transition."),
            ),
            (
                "message",
                s("A human-readable message about the last transition."),
            ),
            (
                "lastTransitionTime",
                time("When the condition last changed status."),
            ),
            (
                "lastHeartbeatTime",
                time("When the condition was last probed."),
            ),
        ],
    )
}

fn selector() -> Value {
    object(
        "A label query over a set of resources.",
        &[
            ("matchLabels", string_map("Labels an object must carry.")),
            (
                "matchExpressions",
                list_of(
                    open("A label selector requirement."),
                    "Label requirements, ANDed.",
                ),
            ),
        ],
    )
}

fn object_reference() -> Value {
    object(
        "A reference to another object.",
        &[
            ("apiVersion", s("API version of the referent.")),
            ("kind", s("Kind of the referent.")),
            ("name", s("Name of the referent.")),
            ("namespace", s("Namespace of the referent.")),
            ("uid", s("UID of the referent.")),
            (
                "resourceVersion",
                s("Specific resourceVersion of the referent."),
            ),
            ("fieldPath", s("A field inside the referent.")),
        ],
    )
}

/// `ObjectMeta`, `OwnerReference` and `Status`, by schema name.
pub fn meta_schemas() -> Vec<(String, Value)> {
    let owner = object(
        "An object that owns this one.",
        &[
            ("apiVersion", s("API version of the owner.")),
            ("kind", s("Kind of the owner.")),
            ("name", s("Name of the owner.")),
            ("uid", s("UID of the owner.")),
            (
                "controller",
                boolean("Whether the owner is the managing controller."),
            ),
            (
                "blockOwnerDeletion",
                boolean("Whether the owner waits for this object in foreground deletion."),
            ),
        ],
    );
    let mut meta = object(
        "ObjectMeta is metadata that all persisted resources must have.",
        &[
            (
                "name",
                s("Name must be unique within a namespace. Cannot be updated."),
            ),
            (
                "generateName",
                s("A prefix the server uses to generate a unique name when name is empty."),
            ),
            (
                "namespace",
                s("The namespace the object lives in. Cannot be updated."),
            ),
            (
                "uid",
                s("Unique in time and space; set by the server. Read-only."),
            ),
            (
                "resourceVersion",
                s("Opaque version of the object, for optimistic concurrency. Read-only."),
            ),
            (
                "generation",
                json!({"type": "integer", "format": "int64", "description": "Sequence number of the desired state. Read-only."}),
            ),
            (
                "creationTimestamp",
                time("When the object was created. Read-only."),
            ),
            (
                "deletionTimestamp",
                time(
                    "When the object will be deleted; set by the server on a delete request. Read-only.",
                ),
            ),
            (
                "deletionGracePeriodSeconds",
                json!({"type": "integer", "format": "int64", "description": "Seconds allowed for graceful termination. Read-only."}),
            ),
            (
                "labels",
                string_map("Map of string keys and values for organizing and selecting objects."),
            ),
            (
                "annotations",
                string_map("Unstructured key value map stored with the object."),
            ),
            (
                "finalizers",
                strings("Must be empty before the object is deleted from the registry."),
            ),
            (
                "ownerReferences",
                list_of(
                    json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"}),
                    "Objects this object depends on.",
                ),
            ),
            (
                "managedFields",
                list_of(
                    open("A field manager's entry."),
                    "Field managers (not tracked by this server).",
                ),
            ),
        ],
    );
    meta["properties"]["finalizers"]["x-kubernetes-list-type"] = json!("set");
    let status = object(
        "Status is a return value for calls that don't return other objects.",
        &[
            ("apiVersion", s("APIVersion of this representation.")),
            ("kind", s("Kind of this representation: Status.")),
            ("status", s("Success or Failure.")),
            ("message", s("A human-readable description of the status.")),
            (
                "reason",
                s("A machine-readable description of why the operation is in Failure status."),
            ),
            ("code", int("Suggested HTTP return code.")),
            ("details", open("Extended data associated with the reason.")),
        ],
    );
    vec![
        (OBJECT_META.to_string(), meta),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference".to_string(),
            owner,
        ),
        (STATUS.to_string(), status),
    ]
}

/// The schema of a built-in kind (without `apiVersion`/`kind`/`metadata`, which
/// [`super::openapi`] adds); a kind this subset does not describe gets open `spec`/`status`.
pub fn kind_schema(group: &str, kind: &str) -> Value {
    let spec_status = |description: &str, spec: Value, status: Value| {
        object(description, &[("spec", spec), ("status", status)])
    };
    match (group, kind) {
        ("", "Node") => spec_status(
            "Node is a worker node in Kubernetes.",
            object(
                "The behavior of a node.",
                &[
                    (
                        "providerID",
                        s("ID of the node assigned by the cloud provider."),
                    ),
                    ("podCIDR", s("The pod IP range assigned to the node.")),
                    (
                        "unschedulable",
                        boolean("Controls node schedulability of new pods (cordon)."),
                    ),
                    (
                        "taints",
                        list_of(open("A taint: key, value, effect."), "The node's taints."),
                    ),
                ],
            ),
            object(
                "The most recently observed status of the node.",
                &[
                    (
                        "addresses",
                        list_of(
                            open("An address: type, address."),
                            "Addresses reachable to the node.",
                        ),
                    ),
                    (
                        "conditions",
                        list_of(condition(), "Current service state of the node."),
                    ),
                    (
                        "nodeInfo",
                        open("General information about the node (kubeletVersion, osImage, …)."),
                    ),
                    ("capacity", open("Total resources of the node.")),
                    ("allocatable", open("Resources available for scheduling.")),
                    (
                        "volumesAttached",
                        list_of(open("An attached volume."), "Volumes attached to the node."),
                    ),
                    (
                        "volumesInUse",
                        strings("Volumes in use (mounted) by the node."),
                    ),
                ],
            ),
        ),
        ("", "Pod") => spec_status(
            "Pod is a collection of containers that can run on a host.",
            object(
                "Specification of the desired behavior of the pod.",
                &[
                    ("nodeName", s("The node the pod is bound to.")),
                    (
                        "containers",
                        list_of(open("A container: name, image, …"), "The pod's containers."),
                    ),
                    (
                        "terminationGracePeriodSeconds",
                        json!({"type": "integer", "format": "int64", "description": "Seconds the pod needs to terminate gracefully."}),
                    ),
                    (
                        "volumes",
                        list_of(open("A volume."), "Volumes the containers can mount."),
                    ),
                    (
                        "tolerations",
                        list_of(open("A toleration."), "The pod's tolerations."),
                    ),
                ],
            ),
            object(
                "Most recently observed status of the pod.",
                &[
                    (
                        "phase",
                        s("Pending, Running, Succeeded, Failed or Unknown."),
                    ),
                    (
                        "reason",
                        s("A brief CamelCase message saying why the pod is in this state."),
                    ),
                    (
                        "conditions",
                        list_of(condition(), "Current service state of the pod."),
                    ),
                    (
                        "containerStatuses",
                        list_of(open("A container's status."), "Statuses of the containers."),
                    ),
                    ("podIP", s("IP address allocated to the pod.")),
                ],
            ),
        ),
        ("policy", "PodDisruptionBudget") => spec_status(
            "PodDisruptionBudget limits the number of pods of an application that are down simultaneously.",
            object(
                "The desired behavior of the budget.",
                &[
                    (
                        "minAvailable",
                        int_or_string("Pods that must still be available after an eviction."),
                    ),
                    (
                        "maxUnavailable",
                        int_or_string("Pods that may be unavailable after an eviction."),
                    ),
                    ("selector", selector()),
                    (
                        "unhealthyPodEvictionPolicy",
                        s("IfHealthyBudget or AlwaysAllow."),
                    ),
                ],
            ),
            object(
                "The most recently observed status of the budget.",
                &[
                    (
                        "observedGeneration",
                        json!({"type": "integer", "format": "int64", "description": "The generation observed when updating this status."}),
                    ),
                    (
                        "disruptedPods",
                        open("Pods whose eviction was processed but not yet observed."),
                    ),
                    (
                        "disruptionsAllowed",
                        int("Number of pod disruptions currently allowed."),
                    ),
                    ("currentHealthy", int("Current number of healthy pods.")),
                    (
                        "desiredHealthy",
                        int("Minimum desired number of healthy pods."),
                    ),
                    (
                        "expectedPods",
                        int("Total number of pods counted by this budget."),
                    ),
                    (
                        "conditions",
                        list_of(condition(), "Conditions of the budget."),
                    ),
                ],
            ),
        ),
        ("", "Namespace") => spec_status(
            "Namespace provides a scope for names.",
            object(
                "The behavior of the namespace.",
                &[("finalizers", strings("Finalizers of the namespace."))],
            ),
            object(
                "The status of the namespace.",
                &[("phase", s("Active or Terminating."))],
            ),
        ),
        ("", "Secret") => object(
            "Secret holds secret data of a certain type.",
            &[
                ("data", string_map("Secret data, base64-encoded values.")),
                (
                    "stringData",
                    string_map("Write-only convenience field: plain values merged into data."),
                ),
                (
                    "type",
                    s("Used to facilitate programmatic handling of secret data."),
                ),
                ("immutable", boolean("Whether the data can be updated.")),
            ],
        ),
        ("", "ConfigMap") => object(
            "ConfigMap holds configuration data for pods to consume.",
            &[
                ("data", string_map("Configuration data.")),
                (
                    "binaryData",
                    string_map("Binary configuration data, base64-encoded."),
                ),
                ("immutable", boolean("Whether the data can be updated.")),
            ],
        ),
        ("", "Event") => object(
            "Event is a report of an event somewhere in the cluster (core/v1).",
            &[
                ("involvedObject", object_reference()),
                (
                    "reason",
                    s("Short, machine-understandable reason for the event."),
                ),
                ("message", s("A human-readable description of the event.")),
                ("type", s("Normal or Warning.")),
                ("source", open("The component reporting the event.")),
                ("firstTimestamp", time("When the event was first recorded.")),
                ("lastTimestamp", time("When the event last occurred.")),
                ("count", int("How many times the event occurred.")),
                (
                    "eventTime",
                    time("When the event was first observed (MicroTime)."),
                ),
                ("action", s("What action was taken or failed.")),
                (
                    "reportingComponent",
                    s("The controller that emitted the event."),
                ),
                ("reportingInstance", s("The ID of the controller instance.")),
            ],
        ),
        ("events.k8s.io", "Event") => object(
            "Event is a report of an event somewhere in the cluster (events.k8s.io/v1).",
            &[
                ("regarding", object_reference()),
                ("related", object_reference()),
                ("reason", s("Why the action was taken.")),
                (
                    "note",
                    s("A human-readable description of the status of this operation."),
                ),
                ("type", s("Normal or Warning.")),
                (
                    "eventTime",
                    time("When the event was first observed (MicroTime)."),
                ),
                (
                    "series",
                    open("Data about the event series this event represents."),
                ),
                ("action", s("What action was taken or failed.")),
                (
                    "reportingController",
                    s("The controller that emitted the event."),
                ),
                ("reportingInstance", s("The ID of the controller instance.")),
                ("deprecatedSource", open("The core/v1 source field.")),
                (
                    "deprecatedFirstTimestamp",
                    time("The core/v1 firstTimestamp field."),
                ),
                (
                    "deprecatedLastTimestamp",
                    time("The core/v1 lastTimestamp field."),
                ),
                ("deprecatedCount", int("The core/v1 count field.")),
            ],
        ),
        ("coordination.k8s.io", "Lease") => object(
            "Lease defines a lease concept.",
            &[(
                "spec",
                object(
                    "The specification of the lease.",
                    &[
                        (
                            "holderIdentity",
                            s("The identity of the holder of the lease."),
                        ),
                        (
                            "leaseDurationSeconds",
                            int("How long candidates wait to force-acquire the lease."),
                        ),
                        ("acquireTime", time("When the current lease was acquired.")),
                        (
                            "renewTime",
                            time("When the current holder last renewed the lease."),
                        ),
                        (
                            "leaseTransitions",
                            int("How many times the lease changed holders."),
                        ),
                    ],
                ),
            )],
        ),
        _ => spec_status(
            &format!("{kind}: this server describes only its spec and status as open objects."),
            open("The desired state."),
            open("The observed state."),
        ),
    }
}
