"""Administration: a tenant's training consent, and what deleting a tenant removed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TrainingChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    training: bool | None = Field(
        description="true: its traces may train the Conductor; false: never; null: the deployment's "
        "CONDUCTOR_TRAIN_ON_TENANT_DATA decides."
    )


class TenantTraining(BaseModel):
    tenant: str
    tenant_id: str
    training: bool | None = Field(description="What the tenant said (null: never said).")
    trains: bool = Field(description="Whether its traces train the Conductor now, the default applied.")


class TrainedCheckpoint(BaseModel):
    checkpoint: str
    status: str
    directly: bool = Field(description="Its own dataset held the tenant (else an ancestor's did).")


class TenantDeletion(BaseModel):
    tenant_id: str
    tenant: str
    deleted_rows: dict[str, int] = Field(description="Rows deleted, by table.")
    files_removed: int
    checkpoints_trained_on_its_data: list[TrainedCheckpoint] = Field(
        description="Weights are not untrained: roll back past these if that matters."
    )
